package app

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

// Config is every setting of the stampede binary. Each field is read from its
// environment variable and may be overridden by the flag of the same name
// (docs/spec.md §7). docs/configuration.md, generated from bind (make docs), lists
// them all.
type Config struct {
	Mode                string        // STAMPEDE_MODE, -mode: "production" (serve's default) or "development" (demo, bench: demo login and checkout, built-in keys)
	HTTPAddr            string        // STAMPEDE_HTTP_ADDR, -http-addr: gateway listen address (127.0.0.1:8080)
	RedisAddr           string        // STAMPEDE_REDIS_ADDR, -redis-addr: host:port; a comma-separated list = Redis Cluster
	RedisPassword       string        // STAMPEDE_REDIS_PASSWORD, -redis-password: Redis AUTH password ("": none)
	RedisDB             int           // STAMPEDE_REDIS_DB, -redis-db: database number (0; ignored on a cluster)
	RedisSentinelMaster string        // STAMPEDE_REDIS_SENTINEL_MASTER, -redis-sentinel-master: Sentinel master name; RedisAddr then lists the Sentinels ("")
	RedisDurability     string        // STAMPEDE_REDIS_DURABILITY, -redis-durability: none, aof or replicated (none)
	RedisReplicaAcks    int           // STAMPEDE_REDIS_REPLICA_ACKS, -redis-replica-acks: replicas a reservation waits for with replicated (1)
	RedisReplicaWait    time.Duration // STAMPEDE_REDIS_REPLICA_WAIT, -redis-replica-wait: bound on that wait (100ms)
	MySQLDSN            string        // STAMPEDE_MYSQL_DSN, -mysql-dsn: go-sql-driver DSN
	MySQLMaxConns       int           // STAMPEDE_MYSQL_MAX_CONNS, -mysql-max-conns: MySQL connections per process (64)
	AMQPURL             string        // STAMPEDE_AMQP_URL, -amqp-url
	AMQPQueueType       string        // STAMPEDE_AMQP_QUEUE_TYPE, -amqp-queue-type: "quorum" (production default) or "classic" (quorum)
	JWTSecret           string        // STAMPEDE_JWT_SECRET, -jwt-secret: HS256 key of bearer tokens (development: a built-in key)
	JWTHS256            bool          // STAMPEDE_JWT_HS256, -jwt-hs256: accept HS256 tokens (default: only without a JWKS)
	JWTHS256Issuer      string        // STAMPEDE_JWT_HS256_ISSUER, -jwt-hs256-issuer: required iss of HS256 tokens (stampede)
	JWTHS256Audience    string        // STAMPEDE_JWT_HS256_AUDIENCE, -jwt-hs256-audience: required aud of HS256 tokens (stampede)
	JWKSURL             string        // STAMPEDE_JWT_JWKS_URL, -jwt-jwks-url: identity providers' key sets for RS256/ES256 tokens, comma-separated, one per issuer ("": HS256 only)
	JWTIssuer           string        // STAMPEDE_JWT_ISSUER, -jwt-issuer: the iss of each JWKS's tokens, comma-separated, in the same order
	JWTAudience         string        // STAMPEDE_JWT_AUDIENCE, -jwt-audience: required aud of JWKS tokens
	JWTAdminGroup       string        // STAMPEDE_JWT_ADMIN_GROUP, -jwt-admin-group: a token listing this group in its groups claim is an admin (then the only way to be one)
	JWTGroupsClaim      string        // STAMPEDE_JWT_GROUPS_CLAIM, -jwt-groups-claim: name of that claim (groups)
	JWTProviderMaxTTL   time.Duration // STAMPEDE_JWT_PROVIDER_MAX_TTL, -jwt-provider-max-ttl: longest an identity provider's token may still live (24h)
	TokenCache          int           // STAMPEDE_TOKEN_CACHE, -token-cache: verified tokens kept (gateway and push), 0 = none (262144)
	PaymentSecret       string        // STAMPEDE_PAYMENT_SECRET, -payment-secret: HMAC-SHA256 key of payment callbacks
	PayTimeout          time.Duration // STAMPEDE_PAY_TIMEOUT, -pay-timeout: WAITING_PAY → CANCELLED after (15m)
	DemoLogin           bool          // STAMPEDE_DEMO_LOGIN, -demo-login: POST /api/auth/login issues tokens (true)
	AdminUsers          string        // STAMPEDE_ADMIN_USERS, -admin-users: comma-separated userIds that demo login makes admins ("")
	Roles               string        // STAMPEDE_ROLES, -roles: comma-separated roles to run (all)
	NodeID              int64         // STAMPEDE_NODE_ID, -node-id: orderNo node 0..1023; -1 = leased from Redis (-1)
	WriterBatch         int           // STAMPEDE_WRITER_BATCH, -writer-batch: entries per writer transaction (500)
	WriterWait          time.Duration // STAMPEDE_WRITER_WAIT, -writer-wait: longest wait to fill a batch (20ms)
	WriterClaimIdle     time.Duration // STAMPEDE_WRITER_CLAIM_IDLE, -writer-claim-idle: reclaim intake entries pending this long from dead writers (30s)
	ConsumerWorkers     int           // STAMPEDE_CONSUMER_WORKERS, -consumer-workers: concurrent messages per queue (8)
	ConsumerPrefetch    int           // STAMPEDE_CONSUMER_PREFETCH, -consumer-prefetch: AMQP prefetch per queue (64)
	ConsumerMaxAttempts int           // STAMPEDE_CONSUMER_MAX_ATTEMPTS, -consumer-max-attempts: deliveries before a failing message is dead-lettered (5)
	ConsumerLock        string        // STAMPEDE_CONSUMER_LOCK, -consumer-lock: "writer" (orders stored locked by the writer) or "batch" (set-based order-lock transactions) (writer)
	ConsumerBatch       int           // STAMPEDE_CONSUMER_BATCH, -consumer-batch: ORDER_CREATED messages per order-lock transaction (256)
	ConsumerBatchWait   time.Duration // STAMPEDE_CONSUMER_BATCH_WAIT, -consumer-batch-wait: longest wait to fill an order-lock batch (5ms)
	ConsumerLockChans   int           // STAMPEDE_CONSUMER_LOCK_CHANNELS, -consumer-lock-channels: order-lock batches in flight per process (2)
	RelayBatch          int           // STAMPEDE_RELAY_BATCH, -relay-batch: outbox rows claimed per round (500)
	RelayWorkers        int           // STAMPEDE_RELAY_WORKERS, -relay-workers: relays per process, each with its own connection (2)
	SweepInterval       time.Duration // STAMPEDE_SWEEP_INTERVAL, -sweep-interval: sweeper period (1s)
	SweepWorkers        int           // STAMPEDE_SWEEP_WORKERS, -sweep-workers: close passes run at once per sweeper, each over its own part of the due orders (4)
	OutboxRetention     time.Duration // STAMPEDE_OUTBOX_RETENTION, -outbox-retention: SENT outbox rows kept this long, 0 = forever (168h)
	PushAddr            string        // STAMPEDE_PUSH_ADDR, -push-addr: push WebSocket listen address (127.0.0.1:8081)
	PushURL             string        // STAMPEDE_PUSH_URL, -push-url: WebSocket URL given to browsers ("" = development: ws://<host>:<push port>/ws; production: the client's own fallback)
	PushMaxSockets      int           // STAMPEDE_PUSH_MAX_SOCKETS, -push-max-sockets: open sockets per user per push process, -1 = no cap (8)
	PushOrigins         string        // STAMPEDE_PUSH_ALLOWED_ORIGINS, -push-allowed-origins: comma-separated Origin host patterns ("": the page's own host)
	PushUserRate        float64       // STAMPEDE_PUSH_HANDSHAKE_USER_RATE, -push-handshake-user-rate: sockets/s one user may open, 0 = no limit (1)
	PushAddrRate        float64       // STAMPEDE_PUSH_HANDSHAKE_ADDR_RATE, -push-handshake-addr-rate: handshakes/s per client address, 0 = no limit (10)
	Currency            string        // STAMPEDE_CURRENCY, -currency: ISO 4217 code of prices, shown by the client (USD)
	StaticDir           string        // STAMPEDE_STATIC_DIR, -static-dir: built client files served at / ("client/dist" if present)
	LogLevel            string        // STAMPEDE_LOG_LEVEL, -log-level: debug, info, warn, error (info)
	Migrate             bool          // STAMPEDE_MIGRATE, -migrate: apply migrations at start-up (false)
	ShutdownTimeout     time.Duration // STAMPEDE_SHUTDOWN_TIMEOUT, -shutdown-timeout: bound on draining at SIGTERM (20s)

	MetricsAddr        string        // STAMPEDE_METRICS_ADDR, -metrics-addr: extra listener for GET /metrics ("": only on the gateway's port)
	PprofAddr          string        // STAMPEDE_PPROF_ADDR, -pprof-addr: admin-only net/http/pprof listener ("": off)
	ReconcileInterval  time.Duration // STAMPEDE_RECONCILE_INTERVAL, -reconcile-interval: sweeper's reconciliation period, 0 = off (30s)
	StuckAfter         time.Duration // STAMPEDE_STUCK_AFTER, -stuck-after: PROCESSING age counted as stuck in metrics (1m)
	RedisCheckInterval time.Duration // STAMPEDE_REDIS_CHECK_INTERVAL, -redis-check-interval: period of the gateway's watch of Redis's settings (10s)

	// Gateway intake (issue 5).
	Intake            string        // STAMPEDE_INTAKE, -intake: "stream" (Redis intake stream, batched writers) or "sync" (MySQL in the request) (stream)
	RateGlobal        float64       // STAMPEDE_RATE_GLOBAL, -rate-global: order requests/s per gateway instance, 0 = no limit (0)
	RateGlobalBurst   int           // STAMPEDE_RATE_GLOBAL_BURST, -rate-global-burst: global bucket size, 0 = one second's worth (0)
	RateUser          float64       // STAMPEDE_RATE_USER, -rate-user: order requests/s per user, 0 = no limit (20)
	RateUserBurst     int           // STAMPEDE_RATE_USER_BURST, -rate-user-burst: per-user bucket size, 0 = two seconds' worth (40)
	RateUserRead      float64       // STAMPEDE_RATE_USER_READ, -rate-user-read: order reads/s per user, 0 = no limit (20)
	RateUserReadBurst int           // STAMPEDE_RATE_USER_READ_BURST, -rate-user-read-burst: its bucket size, 0 = two seconds' worth (0)
	ReservePipeline   int           // STAMPEDE_RESERVE_PIPELINE, -reserve-pipeline: reserve calls per Redis pipeline, 0 = one round trip each (0)
	LookupPipeline    int           // STAMPEDE_LOOKUP_PIPELINE, -lookup-pipeline: sold-out request-record GETs per Redis pipeline, 0 = one round trip each (64)
	SoldOutTTL        time.Duration // STAMPEDE_SOLDOUT_TTL, -soldout-ttl: sold-out products answered from memory this long, 0 = off (200ms)
	SoldOutBuyers     int           // STAMPEDE_SOLDOUT_BUYERS, -soldout-buyers: buyers of a sold-out product shard held in memory to answer everyone else at once, 0 = off (100000)

	// Waiting room (issue 17): the admission pacer runs with the sweeper role.
	RoomRate          float64       // STAMPEDE_ROOM_RATE, -room-rate: admissions/s of every waiting room, 0 = auto from the pipeline's drain (0)
	RoomCeiling       float64       // STAMPEDE_ROOM_CEILING, -room-ceiling: highest admission rate the pacer asks for (2000)
	RoomWindow        time.Duration // STAMPEDE_ROOM_WINDOW, -room-window: an admission not used by an order within it expires (2m)
	RoomTargetBacklog time.Duration // STAMPEDE_ROOM_TARGET_BACKLOG, -room-target-backlog: auto pacer keeps PROCESSING at this many seconds of drain (2s)
	RoomOverbook      int           // STAMPEDE_ROOM_OVERBOOK, -room-overbook: live admissions a room may hold beyond its units left (10)
	RoomPipeline      int           // STAMPEDE_ROOM_PIPELINE, -room-pipeline: ticket calls per room_take.lua call, 0 = one round trip each (64)
	PowSecret         string        // STAMPEDE_POW_SECRET, -pow-secret: HMAC key of proof-of-work challenges ("" = derived from the payment secret)
	PowExpiry         time.Duration // STAMPEDE_POW_EXPIRY, -pow-expiry: how long a proof-of-work challenge can be used (5m)

	command  string          // the subcommand parsed (parse)
	explicit map[string]bool // flag names given as a flag or through their variable (parse)

	// deployment is the database's deployment identity, set by serve after
	// checkDeployment (not a setting): topology declares it on RabbitMQ.
	deployment string
}

// Modes (Config.Mode).
const (
	modeProduction  = "production"
	modeDevelopment = "development"
)

// defaultMode is the mode of a command without STAMPEDE_MODE or --mode: the
// demo and the benchmarks need the demo login and checkout; everything else,
// serve first, is safe by default.
func defaultMode(command string) string {
	if command == "demo" || strings.HasPrefix(command, "bench") {
		return modeDevelopment
	}
	return modeProduction
}

// defaultMetricsAddr is the metrics listener of production mode when
// STAMPEDE_METRICS_ADDR is not set: loopback only (9091, not 9090, which is
// Prometheus's own port).
const defaultMetricsAddr = "127.0.0.1:9091"

// minSecretBytes is the shortest JWT or payment secret production accepts.
const minSecretBytes = 32

// secretFlags are never shown with their values in -h; for dsnFlags the
// password is masked.
var (
	secretFlags = map[string]bool{"jwt-secret": true, "payment-secret": true, "redis-password": true, "pow-secret": true}
	dsnFlags    = map[string]bool{"mysql-dsn": true, "amqp-url": true, "jwt-jwks-url": true}
)

// Roles the binary can run.
var allRoles = []string{"gateway", "writer", "relay", "consumer", "sweeper", "push"}

const (
	devJWTSecret     = "stampede-dev-jwt-secret-change-me"
	devPaymentSecret = "stampede-dev-payment-secret-change-me"
)

func envString(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// bind registers the common settings on fs with defaults from the environment,
// one group of settings per role or subsystem (the sections of
// docs/configuration.md). Every flag's help ends with "[$STAMPEDE_…]", the
// variable it is read from; the flag wins over the variable. Errors from
// malformed environment values are collected in errs.
func (c *Config) bind(fs *flag.FlagSet, errs *[]error, mode string) {
	b := flagBinder{fs: fs, errs: errs}
	c.bindProcess(b, mode)
	c.bindStores(b)
	c.bindIdentity(b)
	c.bindGateway(b)
	c.bindPipeline(b)
	c.bindRoom(b)
	c.bindPush(b)
	c.bindMetrics(b)
}

// flagBinder registers settings on fs, each flag's default read from its
// environment variable when that is set; a malformed value is added to
// errs (STAMPEDE_X="v": why) and the code's default kept.
type flagBinder struct {
	fs   *flag.FlagSet
	errs *[]error
}

// help is text followed by the variable's name, " [$STAMPEDE_…]" (the form
// settingVar reads back).
func (b flagBinder) help(env, text string) string { return text + " [$" + env + "]" }

// envValue is env's value parsed by parse, def when env is unset or its
// value does not parse (then the error is added to b.errs).
func envValue[T any](b flagBinder, env string, def T, parse func(string) (T, error)) T {
	v, ok := os.LookupEnv(env)
	if !ok {
		return def
	}
	x, err := parse(v)
	if err != nil {
		*b.errs = append(*b.errs, fmt.Errorf("%s=%q: %v", env, v, err))
		return def
	}
	return x
}

func parseInt64(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, errors.New("not an integer")
	}
	return n, nil
}

func parseBool(v string) (bool, error) {
	x, err := strconv.ParseBool(v)
	if err != nil {
		return false, errors.New("not a boolean")
	}
	return x, nil
}

func parseFloat(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, errors.New("not a number")
	}
	return f, nil
}

func (b flagBinder) str(p *string, name, env, def, text string) {
	b.fs.StringVar(p, name, envString(env, def), b.help(env, text))
}

func (b flagBinder) dur(p *time.Duration, name, env string, def time.Duration, text string) {
	b.fs.DurationVar(p, name, envValue(b, env, def, time.ParseDuration), b.help(env, text))
}

func (b flagBinder) int64(p *int64, name, env string, def int64, text string) {
	b.fs.Int64Var(p, name, envValue(b, env, def, parseInt64), b.help(env, text))
}

func (b flagBinder) integer(p *int, name, env string, def int, text string) {
	b.fs.IntVar(p, name, int(envValue(b, env, int64(def), parseInt64)), b.help(env, text))
}

func (b flagBinder) boolean(p *bool, name, env string, def bool, text string) {
	b.fs.BoolVar(p, name, envValue(b, env, def, parseBool), b.help(env, text))
}

func (b flagBinder) f64(p *float64, name, env string, def float64, text string) {
	b.fs.Float64Var(p, name, envValue(b, env, def, parseFloat), b.help(env, text))
}

// bindProcess registers the settings of the process itself: mode (its default: mode), roles, logging, migrations and shutdown.
func (c *Config) bindProcess(b flagBinder, mode string) {
	b.str(&c.Mode, "mode", "STAMPEDE_MODE", mode, "production (no demo login or checkout; real secrets required; /metrics only on the metrics listener) or development (demo login and checkout, built-in keys)")
	b.str(&c.Roles, "roles", "STAMPEDE_ROLES", strings.Join(allRoles, ","), "comma-separated roles to run: "+strings.Join(allRoles, ","))
	b.str(&c.LogLevel, "log-level", "STAMPEDE_LOG_LEVEL", "info", "debug, info, warn or error (JSON logs on stderr)")
	b.boolean(&c.Migrate, "migrate", "STAMPEDE_MIGRATE", false, "apply migrations at start-up")
	b.dur(&c.ShutdownTimeout, "shutdown-timeout", "STAMPEDE_SHUTDOWN_TIMEOUT", 20*time.Second, "bound on draining at SIGTERM; the process exits 1 if roles are still draining then")
}

// bindStores registers the addresses and settings of Redis, MySQL and RabbitMQ.
func (c *Config) bindStores(b flagBinder) {
	b.str(&c.RedisAddr, "redis-addr", "STAMPEDE_REDIS_ADDR", "127.0.0.1:6379", "Redis host:port; comma-separated list = Redis Cluster")
	b.str(&c.RedisPassword, "redis-password", "STAMPEDE_REDIS_PASSWORD", "", "Redis AUTH password (requirepass; empty: none)")
	b.integer(&c.RedisDB, "redis-db", "STAMPEDE_REDIS_DB", 0, "Redis database number (ignored on a cluster)")
	b.str(&c.RedisSentinelMaster, "redis-sentinel-master", "STAMPEDE_REDIS_SENTINEL_MASTER", "", "Redis Sentinel master name: -redis-addr then lists the Sentinels and every process follows the current primary through failovers (empty: no Sentinel)")
	b.str(&c.RedisDurability, "redis-durability", "STAMPEDE_REDIS_DURABILITY", "none", "what an accepted reservation must reach before its 202: none, aof (every Redis master must run appendonly yes) or replicated (WAIT for -redis-replica-acks replicas, else 503)")
	b.integer(&c.RedisReplicaAcks, "redis-replica-acks", "STAMPEDE_REDIS_REPLICA_ACKS", 1, "replicas that must acknowledge a reservation with -redis-durability replicated (1..16)")
	b.dur(&c.RedisReplicaWait, "redis-replica-wait", "STAMPEDE_REDIS_REPLICA_WAIT", 100*time.Millisecond, "longest wait for those replicas (WAIT timeout); longer answers 503 and the writer stores the reservation anyway")
	b.dur(&c.RedisCheckInterval, "redis-check-interval", "STAMPEDE_REDIS_CHECK_INTERVAL", 10*time.Second, "how often the gateway re-reads Redis's maxmemory-policy and persistence settings; a policy other than noeviction makes it not ready")
	b.str(&c.MySQLDSN, "mysql-dsn", "STAMPEDE_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/stampede?parseTime=true", "MySQL/MariaDB DSN (UTC is forced)")
	b.integer(&c.MySQLMaxConns, "mysql-max-conns", "STAMPEDE_MYSQL_MAX_CONNS", 64, "MySQL connections per process (open and idle); processes × this must stay below the server's max_connections")
	b.str(&c.AMQPURL, "amqp-url", "STAMPEDE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL; the nodes of a cluster as a comma-separated list of URLs (same vhost and credentials): each connection goes to the first that answers, and to another one when its node dies")
	b.str(&c.AMQPQueueType, "amqp-queue-type", "STAMPEDE_AMQP_QUEUE_TYPE", string(pipeline.DefaultQueueType), "type of Stampede's durable RabbitMQ queues: quorum (replicated; delivery limit from -consumer-max-attempts) or classic (single node)")
}

// bindIdentity registers the bearer-token, payment-callback and demo-login settings (gateway, push, stampede token).
func (c *Config) bindIdentity(b flagBinder) {
	b.str(&c.JWTSecret, "jwt-secret", "STAMPEDE_JWT_SECRET", "", "HS256 key of bearer tokens, at least 32 bytes of high entropy in production, not the payment secret (development: a built-in key); prefer the variable: a flag shows in the process list")
	b.boolean(&c.JWTHS256, "jwt-hs256", "STAMPEDE_JWT_HS256", false, "accept HS256 tokens of -jwt-secret (default: true without -jwt-jwks-url, false with it: production with an identity provider is JWKS-only unless this says otherwise)")
	b.str(&c.JWTHS256Issuer, "jwt-hs256-issuer", "STAMPEDE_JWT_HS256_ISSUER", auth.DefaultHS256Issuer, "required iss claim of HS256 tokens (what stampede token and the demo login put in)")
	b.str(&c.JWTHS256Audience, "jwt-hs256-audience", "STAMPEDE_JWT_HS256_AUDIENCE", auth.DefaultHS256Audience, "required aud claim of HS256 tokens")
	b.str(&c.PaymentSecret, "payment-secret", "STAMPEDE_PAYMENT_SECRET", "", "HMAC-SHA256 key of payment callbacks, at least 32 bytes of high entropy in production (development: a built-in key)")
	b.str(&c.JWKSURL, "jwt-jwks-url", "STAMPEDE_JWT_JWKS_URL", "", "identity providers' JWKS URLs, comma-separated, one per -jwt-issuer: RS256/ES256 tokens verified against the keys of the provider their iss names (cached, refreshed on the provider's cache headers or every 15 min, refetched on an unknown kid); https in production (http only on loopback)")
	b.str(&c.JWTIssuer, "jwt-issuer", "STAMPEDE_JWT_ISSUER", "", "the iss of each -jwt-jwks-url's tokens, comma-separated, in the same order")
	b.str(&c.JWTAudience, "jwt-audience", "STAMPEDE_JWT_AUDIENCE", "", "required aud claim of JWKS-verified tokens")
	b.str(&c.JWTAdminGroup, "jwt-admin-group", "STAMPEDE_JWT_ADMIN_GROUP", "", "a token whose groups claim lists this group is an admin; when set, the only way to be one (role: admin then counts for nothing)")
	b.str(&c.JWTGroupsClaim, "jwt-groups-claim", "STAMPEDE_JWT_GROUPS_CLAIM", "groups", "claim listing the caller's groups")
	b.dur(&c.JWTProviderMaxTTL, "jwt-provider-max-ttl", "STAMPEDE_JWT_PROVIDER_MAX_TTL", auth.DefaultMaxProviderTokenTTL, "longest an identity provider's token may still live (exp − now): a token beyond it is refused (1m to 720h; HS256 tokens have their own bounds, 24h and 1h for admins)")
	b.integer(&c.TokenCache, "token-cache", "STAMPEDE_TOKEN_CACHE", 1<<18, "verified bearer tokens kept in memory, about 150 bytes each (0: every token checked in full); an LRU smaller than the buyers who retry in turn hits nothing, so size it for a sale's active buyers. Identity providers' tokens and HS256 tokens with other headers only: tokens of Stampede's own HS256 signers are checked each time, which costs less than the cache's miss")
	b.boolean(&c.DemoLogin, "demo-login", "STAMPEDE_DEMO_LOGIN", true, "enable the demo identity provider POST /api/auth/login (development mode only)")
	b.str(&c.AdminUsers, "admin-users", "STAMPEDE_ADMIN_USERS", "", "comma-separated userIds that demo login makes admins (development mode only)")
}

// bindGateway registers the gateway role's settings: listener, orderNo node, intake, rate limits, Redis pipelines, sold-out cache and the client it serves.
func (c *Config) bindGateway(b flagBinder) {
	static := ""
	if st, err := os.Stat("client/dist/index.html"); err == nil && !st.IsDir() {
		static = "client/dist"
	}
	b.str(&c.HTTPAddr, "http-addr", "STAMPEDE_HTTP_ADDR", "127.0.0.1:8080", "gateway listen address (in development mode also serves /metrics)")
	b.int64(&c.NodeID, "node-id", "STAMPEDE_NODE_ID", -1, "orderNo node id 0..1023, unique per gateway process; -1 = lease a free one from Redis")
	b.str(&c.Intake, "intake", "STAMPEDE_INTAKE", "stream", "order intake: stream (Redis intake stream, batched MySQL writers) or sync (the order is written to MySQL within the request: the baseline)")
	b.f64(&c.RateGlobal, "rate-global", "STAMPEDE_RATE_GLOBAL", 0, "order requests/s one gateway instance accepts (token bucket; 0: no limit)")
	b.integer(&c.RateGlobalBurst, "rate-global-burst", "STAMPEDE_RATE_GLOBAL_BURST", 0, "global token bucket size (0: one second's worth)")
	b.f64(&c.RateUser, "rate-user", "STAMPEDE_RATE_USER", 20, "order requests/s one user may send (token bucket; 0: no limit)")
	b.integer(&c.RateUserBurst, "rate-user-burst", "STAMPEDE_RATE_USER_BURST", 40, "per-user token bucket size (0: two seconds' worth)")
	b.f64(&c.RateUserRead, "rate-user-read", "STAMPEDE_RATE_USER_READ", 20, "order reads/s one user may send: GET /api/orders and GET /api/orders/{orderNo}, a token bucket of their own (0: no limit)")
	b.integer(&c.RateUserReadBurst, "rate-user-read-burst", "STAMPEDE_RATE_USER_READ_BURST", 0, "per-user order-read token bucket size (0: two seconds' worth)")
	b.integer(&c.ReservePipeline, "reserve-pipeline", "STAMPEDE_RESERVE_PIPELINE", 0, "send concurrent requests' reserve calls to Redis in pipelines of up to this many (0: one round trip each)")
	b.integer(&c.LookupPipeline, "lookup-pipeline", "STAMPEDE_LOOKUP_PIPELINE", 64, "send the request-record GETs of concurrent sold-out answers to Redis in pipelines of up to this many (0: one round trip each)")
	b.dur(&c.SoldOutTTL, "soldout-ttl", "STAMPEDE_SOLDOUT_TTL", 200*time.Millisecond, "a sold-out product is answered from the gateway's memory this long; bounds the delay before returned stock sells again (0: off)")
	b.integer(&c.SoldOutBuyers, "soldout-buyers", "STAMPEDE_SOLDOUT_BUYERS", 100_000, "a sold-out product shard with up to this many buyers has its buyers held in memory, so everyone else is answered SOLD_OUT without Redis (0: off; more buyers: one Redis lookup per answer)")
	b.str(&c.Currency, "currency", "STAMPEDE_CURRENCY", "USD", "ISO 4217 code of prices and amounts (integer minor units of it), given to the client by GET /api/config")
	b.str(&c.StaticDir, "static-dir", "STAMPEDE_STATIC_DIR", static, "built client files served at / (default client/dist if present)")
}

// bindPipeline registers the writer, consumer, relay and sweeper roles' settings.
func (c *Config) bindPipeline(b flagBinder) {
	b.integer(&c.WriterBatch, "writer-batch", "STAMPEDE_WRITER_BATCH", 500, fmt.Sprintf("reservations per writer transaction (1..%d)", pipeline.MaxWriterBatch))
	b.dur(&c.WriterWait, "writer-wait", "STAMPEDE_WRITER_WAIT", 20*time.Millisecond, "longest wait to fill a writer batch")
	b.dur(&c.WriterClaimIdle, "writer-claim-idle", "STAMPEDE_WRITER_CLAIM_IDLE", 30*time.Second, "reclaim intake entries left pending this long by a dead writer")
	b.integer(&c.ConsumerWorkers, "consumer-workers", "STAMPEDE_CONSUMER_WORKERS", 8, "concurrent messages per consumer queue")
	b.integer(&c.ConsumerPrefetch, "consumer-prefetch", "STAMPEDE_CONSUMER_PREFETCH", 64, "AMQP prefetch per consumer queue")
	b.integer(&c.ConsumerMaxAttempts, "consumer-max-attempts", "STAMPEDE_CONSUMER_MAX_ATTEMPTS", 5, "deliveries of a message failing with transient errors before it goes to the dead-letter queue stampede.dlq (1..100)")
	b.str(&c.ConsumerLock, "consumer-lock", "STAMPEDE_CONSUMER_LOCK", "writer", "order-lock design: writer (the writer's batch transaction stores orders already WAITING_PAY or FAILED, with one conditional stock UPDATE per product: no ORDER_CREATED message), or batch (one set-based MySQL transaction per batch of ORDER_CREATED messages; unpaid orders closed by the sweeper's deadline scan)")
	b.integer(&c.ConsumerBatch, "consumer-batch", "STAMPEDE_CONSUMER_BATCH", 256, fmt.Sprintf("ORDER_CREATED messages per order-lock transaction (1..%d)", persistence.MaxLockBatch))
	b.dur(&c.ConsumerBatchWait, "consumer-batch-wait", "STAMPEDE_CONSUMER_BATCH_WAIT", 5*time.Millisecond, "longest wait to fill an order-lock batch once its first message arrived")
	b.integer(&c.ConsumerLockChans, "consumer-lock-channels", "STAMPEDE_CONSUMER_LOCK_CHANNELS", 2, "order-lock batches applied at once per process, each on its own AMQP channel (1..64)")
	b.dur(&c.PayTimeout, "pay-timeout", "STAMPEDE_PAY_TIMEOUT", 15*time.Minute, "time to pay before a WAITING_PAY order is cancelled")
	b.integer(&c.RelayBatch, "relay-batch", "STAMPEDE_RELAY_BATCH", 500, "outbox rows claimed per relay round")
	b.integer(&c.RelayWorkers, "relay-workers", "STAMPEDE_RELAY_WORKERS", 2, "relays per process, each claiming with SKIP LOCKED on its own RabbitMQ connection, so one's confirm wait overlaps another's claim (1..16)")
	b.dur(&c.SweepInterval, "sweep-interval", "STAMPEDE_SWEEP_INTERVAL", time.Second, "sweeper period")
	b.integer(&c.SweepWorkers, "sweep-workers", "STAMPEDE_SWEEP_WORKERS", 4, fmt.Sprintf("close passes a sweeper runs at once, each over its own part of the due orders (id mod this) under its own MySQL advisory lock, so a sale's unpaid orders close as fast as they were locked; the same value on every sweeper (1..%d)", persistence.MaxCloseParts))
	b.dur(&c.OutboxRetention, "outbox-retention", "STAMPEDE_OUTBOX_RETENTION", 7*24*time.Hour, "SENT outbox rows older than this are deleted by the sweeper; a purged event cannot be replayed from the DLQ through the outbox (0: keep every row)")
	b.dur(&c.ReconcileInterval, "reconcile-interval", "STAMPEDE_RECONCILE_INTERVAL", 30*time.Second, "period of the sweeper's Redis ⇄ MySQL reconciliation, exported as stampede_reconcile_drift (0: off)")
}

// bindRoom registers the waiting room's settings: the admission pacer (sweeper role) and the tickets and proof-of-work (gateway).
func (c *Config) bindRoom(b flagBinder) {
	b.f64(&c.RoomRate, "room-rate", "STAMPEDE_ROOM_RATE", 0, "waiting-room admissions per second (0: auto, from the pipeline's measured drain)")
	b.f64(&c.RoomCeiling, "room-ceiling", "STAMPEDE_ROOM_CEILING", 2000, "highest waiting-room admission rate the pacer ever asks for, per second")
	b.dur(&c.RoomWindow, "room-window", "STAMPEDE_ROOM_WINDOW", 2*time.Minute, "a waiting-room admission not used by an order within this window expires and its place passes on")
	b.dur(&c.RoomTargetBacklog, "room-target-backlog", "STAMPEDE_ROOM_TARGET_BACKLOG", 2*time.Second, "the auto pacer keeps the orders not yet past PROCESSING at this many seconds of drain")
	b.integer(&c.RoomOverbook, "room-overbook", "STAMPEDE_ROOM_OVERBOOK", 10, "live waiting-room admissions a fifo or random room may hold beyond its units left, so that admitted buyers who never order do not hold the last units a whole window each (a draw admits exactly its units)")
	b.integer(&c.RoomPipeline, "room-pipeline", "STAMPEDE_ROOM_PIPELINE", 64, "answer up to this many concurrent requests' waiting-room ticket calls with one room_take.lua call (0: one call and round trip each)")
	b.str(&c.PowSecret, "pow-secret", "STAMPEDE_POW_SECRET", "", "HMAC key of waiting-room proof-of-work challenges, the same on every gateway, at least 32 bytes of high entropy in production, not the payment or JWT secret (empty: derived from the payment secret)")
	b.dur(&c.PowExpiry, "pow-expiry", "STAMPEDE_POW_EXPIRY", 5*time.Minute, "how long a waiting-room proof-of-work challenge can be used (at least 10s)")
}

// bindPush registers the push role's settings.
func (c *Config) bindPush(b flagBinder) {
	b.str(&c.PushAddr, "push-addr", "STAMPEDE_PUSH_ADDR", "127.0.0.1:8081", "push WebSocket listen address")
	b.str(&c.PushURL, "push-url", "STAMPEDE_PUSH_URL", "", "WebSocket URL given to browsers by GET /api/config (empty: development ws://<request host>:<push port>/ws; production none, the client uses its own host and port 8081)")
	b.integer(&c.PushMaxSockets, "push-max-sockets", "STAMPEDE_PUSH_MAX_SOCKETS", 8, "open WebSockets per user per push process; one more closes the user's oldest with 4429 (-1: no cap)")
	b.str(&c.PushOrigins, "push-allowed-origins", "STAMPEDE_PUSH_ALLOWED_ORIGINS", "", "comma-separated Origin host patterns allowed to open WebSockets, e.g. shop.example.com,*.example.com:8443 (empty: the page's own host; *: any)")
	b.f64(&c.PushUserRate, "push-handshake-user-rate", "STAMPEDE_PUSH_HANDSHAKE_USER_RATE", 1, "WebSockets per second one user may open (a bucket of 10 s worth, checked before any database read; over it: close 1013); 0: no limit")
	b.f64(&c.PushAddrRate, "push-handshake-addr-rate", "STAMPEDE_PUSH_HANDSHAKE_ADDR_RATE", 10, "WebSocket handshakes per second one client address may start (a bucket of 10 s worth; over it: 429 before the upgrade; loopback peers such as a local proxy are not limited); 0: no limit")
}

// bindMetrics registers the metrics and profiling listeners and the stuck-order age.
func (c *Config) bindMetrics(b flagBinder) {
	b.str(&c.MetricsAddr, "metrics-addr", "STAMPEDE_METRICS_ADDR", "", "listener serving GET /metrics and GET /readyz (production default "+defaultMetricsAddr+"; \"\" or off: none; development also serves /metrics on the gateway's port)")
	b.str(&c.PprofAddr, "pprof-addr", "STAMPEDE_PPROF_ADDR", "", "net/http/pprof listener, e.g. 127.0.0.1:6060 (empty: off; no /debug/pprof/cmdline); production refuses a non-loopback address")
	b.dur(&c.StuckAfter, "stuck-after", "STAMPEDE_STUCK_AFTER", time.Minute, "age after which a PROCESSING order counts in stampede_orders_stuck_processing")
}

// Validate returns "invalid config: ..." for settings that cannot work: the
// errors of every group of checks below, joined.
func (c *Config) Validate() error {
	var errs []error
	for _, check := range []func() []error{
		c.validateProcess, c.validateMode, c.validateIdentity, c.validateRedis,
		c.validateGateway, c.validatePipeline, c.validateRoom, c.validatePush, c.validateAddrs,
	} {
		errs = append(errs, check()...)
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// inRange adds "<what> v is outside lo..hi" to errs unless lo ≤ v ≤ hi.
func inRange[T int | int64](errs []error, what string, v, lo, hi T) []error {
	if v < lo || v > hi {
		return append(errs, fmt.Errorf("%s %d is outside %d..%d", what, v, lo, hi))
	}
	return errs
}

// validateProcess checks the process settings: roles, demo admins, MySQL connections, shutdown.
func (c *Config) validateProcess() []error {
	var errs []error
	if _, err := c.roleSet(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.adminIDs(); err != nil {
		errs = append(errs, err)
	}
	errs = inRange(errs, "mysql max conns", c.MySQLMaxConns, 2, 1000)
	if c.ShutdownTimeout < time.Second {
		errs = append(errs, fmt.Errorf("shutdown timeout %s is under 1s", c.ShutdownTimeout))
	}
	return errs
}

// validateRedis checks the Redis durability and settings-watch settings.
func (c *Config) validateRedis() []error {
	var errs []error
	if _, err := gateway.ParseDurability(c.RedisDurability); err != nil {
		errs = append(errs, err)
	}
	errs = inRange(errs, "redis replica acks", c.RedisReplicaAcks, 1, 16)
	if c.RedisReplicaWait < time.Millisecond || c.RedisReplicaWait > 10*time.Second {
		errs = append(errs, fmt.Errorf("redis replica wait %s is outside 1ms..10s", c.RedisReplicaWait))
	}
	if c.RedisCheckInterval < time.Second {
		errs = append(errs, fmt.Errorf("redis check interval %s is under 1s", c.RedisCheckInterval))
	}
	return errs
}

// validateGateway checks the gateway role's settings: orderNo node, intake, pipelines, rate limits and caches.
func (c *Config) validateGateway() []error {
	var errs []error
	errs = inRange(errs, "node id", c.NodeID, -1, 1023)
	if c.Intake != "stream" && c.Intake != "sync" {
		errs = append(errs, fmt.Errorf("intake %q is neither stream nor sync", c.Intake))
	}
	errs = inRange(errs, "reserve pipeline", c.ReservePipeline, 0, 1024)
	errs = inRange(errs, "lookup pipeline", c.LookupPipeline, 0, 1024)
	if c.RateGlobal < 0 || c.RateUser < 0 || c.RateGlobalBurst < 0 || c.RateUserBurst < 0 || c.SoldOutTTL < 0 || c.SoldOutBuyers < 0 || c.TokenCache < 0 ||
		c.RateUserRead < 0 || c.RateUserReadBurst < 0 {
		errs = append(errs, errors.New("rate limits, bursts, sold-out TTL and buyers, token cache must be >= 0"))
	}
	return errs
}

// validatePipeline checks the writer, consumer, relay and sweeper settings and the RabbitMQ queue type.
func (c *Config) validatePipeline() []error {
	var errs []error
	if c.PayTimeout < time.Second {
		errs = append(errs, fmt.Errorf("pay timeout %s is under 1s", c.PayTimeout))
	}
	errs = inRange(errs, "writer batch", c.WriterBatch, 1, pipeline.MaxWriterBatch)
	errs = inRange(errs, "consumer max attempts", c.ConsumerMaxAttempts, 1, 100)
	if c.ConsumerLock != "writer" && c.ConsumerLock != "batch" {
		errs = append(errs, fmt.Errorf("consumer lock %q is neither writer nor batch", c.ConsumerLock))
	}
	errs = inRange(errs, "consumer batch", c.ConsumerBatch, 1, persistence.MaxLockBatch)
	if c.ConsumerBatchWait <= 0 || c.ConsumerBatchWait > time.Second {
		errs = append(errs, fmt.Errorf("consumer batch wait %s is outside (0, 1s]", c.ConsumerBatchWait))
	}
	errs = inRange(errs, "consumer lock channels", c.ConsumerLockChans, 1, 64)
	if _, err := pipeline.ParseQueueType(c.AMQPQueueType); err != nil {
		errs = append(errs, err)
	}
	errs = inRange(errs, "sweep workers", c.SweepWorkers, 1, persistence.MaxCloseParts)
	errs = inRange(errs, "relay workers", c.RelayWorkers, 1, 16)
	if c.ConsumerWorkers < 1 || c.ConsumerPrefetch < 1 || c.RelayBatch < 1 {
		errs = append(errs, errors.New("consumer workers, consumer prefetch and relay batch must be >= 1"))
	}
	if c.WriterWait <= 0 || c.SweepInterval <= 0 || c.WriterClaimIdle < time.Second {
		errs = append(errs, errors.New("writer wait and sweep interval must be positive, writer claim idle at least 1s"))
	}
	if c.OutboxRetention < 0 {
		errs = append(errs, fmt.Errorf("outbox retention %s is negative", c.OutboxRetention))
	}
	if c.ReconcileInterval < 0 || c.StuckAfter <= 0 {
		errs = append(errs, errors.New("reconcile interval must be >= 0 and stuck-after > 0"))
	}
	return errs
}

// validateRoom checks the waiting room's settings.
func (c *Config) validateRoom() []error {
	var errs []error
	if c.RoomOverbook < 0 {
		errs = append(errs, fmt.Errorf("room overbook %d is negative", c.RoomOverbook))
	}
	errs = inRange(errs, "room pipeline", c.RoomPipeline, 0, 1024)
	if c.PowExpiry < 10*time.Second {
		errs = append(errs, fmt.Errorf("pow expiry %s is under 10s", c.PowExpiry))
	}
	if c.RoomRate < 0 || c.RoomCeiling <= 0 || c.RoomRate > c.RoomCeiling || c.RoomWindow < time.Second || c.RoomTargetBacklog <= 0 {
		errs = append(errs, errors.New("waiting room: room rate must be 0 (auto) up to the ceiling, the ceiling positive, the window at least 1s and the target backlog positive"))
	}
	return errs
}

// validatePush checks the push role's settings.
func (c *Config) validatePush() []error {
	var errs []error
	if c.PushMaxSockets < -1 || c.PushMaxSockets == 0 {
		errs = append(errs, fmt.Errorf("push max sockets %d: want a positive cap or -1 for none", c.PushMaxSockets))
	}
	if c.PushUserRate < 0 || c.PushAddrRate < 0 {
		errs = append(errs, errors.New("push handshake rates must be >= 0 (0: no limit)"))
	}
	return errs
}

// validateAddrs checks that every listen address is host:port (the optional ones may be empty).
func (c *Config) validateAddrs() []error {
	var errs []error
	for _, a := range []struct{ name, addr string }{{"http", c.HTTPAddr}, {"push", c.PushAddr}, {"metrics", c.MetricsAddr}, {"pprof", c.PprofAddr}} {
		if a.addr == "" && a.name != "http" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s address %q is not host:port", a.name, a.addr))
		}
	}
	return errs
}

// resolve applies the defaults that depend on the mode, after the flags
// were parsed (parse): development fills in the built-in keys; production
// turns the demo login off and opens the metrics listener on loopback,
// unless those settings were given.
func (c *Config) resolve() {
	switch c.Mode {
	case modeDevelopment:
		if c.JWTSecret == "" {
			c.JWTSecret = devJWTSecret
		}
		if c.PaymentSecret == "" {
			c.PaymentSecret = devPaymentSecret
		}
	case modeProduction:
		if !c.explicit["metrics-addr"] {
			c.MetricsAddr = defaultMetricsAddr
		}
		if !c.explicit["demo-login"] {
			c.DemoLogin = false
		}
	}
	if c.MetricsAddr == "off" {
		c.MetricsAddr = ""
	}
	if !c.explicit["jwt-hs256"] {
		c.JWTHS256 = c.hs256Default()
	}
}

// validateMode checks what the mode requires. Production: no demo login or
// demo admins, an issuer and audience with a JWKS, pprof on loopback only,
// and for the processes that use them (a gateway: both; push and `stampede
// token`: the JWT secret, when HS256 is on) secrets production accepts
// (validateSecrets). Each error names the setting.
func (c *Config) validateMode() []error {
	switch c.Mode {
	case modeDevelopment:
		return nil
	case modeProduction:
	default:
		return []error{fmt.Errorf("STAMPEDE_MODE %q is neither production nor development", c.Mode)}
	}
	var errs []error
	if c.command == "demo" || strings.HasPrefix(c.command, "bench") {
		errs = append(errs, fmt.Errorf("stampede %s runs in development mode only (STAMPEDE_MODE=development)", c.command))
	}
	if c.DemoLogin {
		errs = append(errs, errors.New("STAMPEDE_DEMO_LOGIN: the demo login does not exist in production mode (it signs a token for any userId)"))
	}
	if c.AdminUsers != "" {
		errs = append(errs, errors.New("STAMPEDE_ADMIN_USERS: demo-login admins do not exist in production mode; admins carry role: admin or the STAMPEDE_JWT_ADMIN_GROUP group in their token"))
	}
	if c.JWKSURL != "" && (c.JWTIssuer == "" || c.JWTAudience == "") {
		errs = append(errs, errors.New("STAMPEDE_JWT_ISSUER and STAMPEDE_JWT_AUDIENCE must be set with STAMPEDE_JWT_JWKS_URL in production mode: "+
			"otherwise tokens the provider issued for other applications are accepted"))
	}
	if host, _, err := net.SplitHostPort(c.PprofAddr); c.PprofAddr != "" && err == nil && !isLoopback(host) {
		errs = append(errs, fmt.Errorf("STAMPEDE_PPROF_ADDR %s is not a loopback address: production mode refuses to serve profiles "+
			"(heap contents, goroutine stacks) beyond this machine; use 127.0.0.1 and an SSH tunnel", c.PprofAddr))
	}
	errs = append(errs, c.validateSecrets()...)
	return errs
}

// devWarning is the one line development mode logs at start, listing what
// it leaves open; "" in production mode.
func (c *Config) devWarning() string {
	if c.Mode != modeDevelopment {
		return ""
	}
	roles, _ := c.roleSet()
	var open []string
	if roles["gateway"] {
		if c.DemoLogin {
			open = append(open, "demo login POST /api/auth/login signs a token for any userId")
		}
		if c.AdminUsers != "" {
			open = append(open, "it signs admin tokens for STAMPEDE_ADMIN_USERS="+c.AdminUsers)
		}
		open = append(open, "demo checkout POST /api/orders/{orderNo}/pay pays without a payment provider",
			"/metrics is served on the public API port", "GET /api/config echoes the request's Host")
	}
	if c.JWTSecret == devJWTSecret {
		open = append(open, "STAMPEDE_JWT_SECRET is the built-in development key")
	}
	if c.PaymentSecret == devPaymentSecret {
		open = append(open, "STAMPEDE_PAYMENT_SECRET is the built-in development key")
	}
	return "DEVELOPMENT MODE, UNSAFE FOR REAL SALES: " + strings.Join(open, "; ") +
		" (STAMPEDE_MODE=production, the default of serve, refuses all of this)"
}

func (c *Config) roleSet() (map[string]bool, error) {
	set := map[string]bool{}
	for _, r := range strings.Split(c.Roles, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if r == "all" {
			for _, a := range allRoles {
				set[a] = true
			}
			continue
		}
		known := false
		for _, a := range allRoles {
			known = known || a == r
		}
		if !known {
			return nil, fmt.Errorf("unknown role %q (roles: %s)", r, strings.Join(allRoles, ","))
		}
		set[r] = true
	}
	if len(set) == 0 {
		return nil, errors.New("no roles selected")
	}
	return set, nil
}

func (c *Config) adminIDs() ([]int64, error) {
	var out []int64
	for _, s := range strings.Split(c.AdminUsers, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("admin user %q is not a positive integer", s)
		}
		out = append(out, id)
	}
	return out, nil
}

// pushOrigins is PushOrigins as a list (nil: the page's own host).
func (c *Config) pushOrigins() []string {
	var out []string
	for _, o := range strings.Split(c.PushOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

func (c *Config) redisAddrs() []string {
	var out []string
	for _, a := range strings.Split(c.RedisAddr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// topology is what this process declares on RabbitMQ: the configured queue
// type, the consumers' retry budget as the quorum delivery limit, and the
// deployment identity once serve has read it (checkDeployment; the vhost's
// marker queue carries it).
func (c *Config) topology() pipeline.TopologyConfig {
	return pipeline.TopologyConfig{QueueType: pipeline.QueueType(c.AMQPQueueType), MaxAttempts: c.ConsumerMaxAttempts,
		Deployment: c.deployment}
}
