package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is every setting of the stampede binary. Each field is read from its
// environment variable and may be overridden by the flag of the same name
// (SPEC §7). The table in README.md lists them all.
type Config struct {
	HTTPAddr         string        // STAMPEDE_HTTP_ADDR, -http-addr: gateway listen address (127.0.0.1:8080)
	RedisAddr        string        // STAMPEDE_REDIS_ADDR, -redis-addr: host:port; a comma-separated list = Redis Cluster
	RedisDB          int           // STAMPEDE_REDIS_DB, -redis-db: database number (0; ignored on a cluster)
	MySQLDSN         string        // STAMPEDE_MYSQL_DSN, -mysql-dsn: go-sql-driver DSN
	AMQPURL          string        // STAMPEDE_AMQP_URL, -amqp-url
	JWTSecret        string        // STAMPEDE_JWT_SECRET, -jwt-secret: HS256 key of bearer tokens
	PaymentSecret    string        // STAMPEDE_PAYMENT_SECRET, -payment-secret: HMAC-SHA256 key of payment callbacks
	PayTimeout       time.Duration // STAMPEDE_PAY_TIMEOUT, -pay-timeout: WAITING_PAY → CANCELLED after (15m)
	DemoLogin        bool          // STAMPEDE_DEMO_LOGIN, -demo-login: POST /api/auth/login issues tokens (true)
	AdminUsers       string        // STAMPEDE_ADMIN_USERS, -admin-users: comma-separated userIds that demo login makes admins ("")
	Roles            string        // STAMPEDE_ROLES, -roles: comma-separated roles to run (all)
	NodeID           int64         // STAMPEDE_NODE_ID, -node-id: orderNo node 0..1023; -1 = random (-1)
	WriterBatch      int           // STAMPEDE_WRITER_BATCH, -writer-batch: entries per writer transaction (500)
	WriterWait       time.Duration // STAMPEDE_WRITER_WAIT, -writer-wait: longest wait to fill a batch (20ms)
	ConsumerWorkers  int           // STAMPEDE_CONSUMER_WORKERS, -consumer-workers: concurrent messages per queue (8)
	ConsumerPrefetch int           // STAMPEDE_CONSUMER_PREFETCH, -consumer-prefetch: AMQP prefetch per queue (64)
	RelayBatch       int           // STAMPEDE_RELAY_BATCH, -relay-batch: outbox rows claimed per round (500)
	SweepInterval    time.Duration // STAMPEDE_SWEEP_INTERVAL, -sweep-interval: sweeper period (1s)
	PushAddr         string        // STAMPEDE_PUSH_ADDR, -push-addr: push WebSocket listen address (127.0.0.1:8081)
	PushURL          string        // STAMPEDE_PUSH_URL, -push-url: WebSocket URL given to browsers ("" = ws://<host>:<push port>/ws)
	StaticDir        string        // STAMPEDE_STATIC_DIR, -static-dir: built client files served at / ("client/dist" if present)
	LogLevel         string        // STAMPEDE_LOG_LEVEL, -log-level: debug, info, warn, error (info)
	Migrate          bool          // STAMPEDE_MIGRATE, -migrate: apply migrations at start-up (false)
	ShutdownTimeout  time.Duration // STAMPEDE_SHUTDOWN_TIMEOUT, -shutdown-timeout: bound on draining at SIGTERM (20s)
}

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

// bind registers the common settings on fs with defaults from the environment.
// Errors from malformed environment values are collected in errs.
func (c *Config) bind(fs *flag.FlagSet, errs *[]error) {
	durEnv := func(name string, def time.Duration) time.Duration {
		v, ok := os.LookupEnv(name)
		if !ok {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s=%q: %v", name, v, err))
			return def
		}
		return d
	}
	intEnv := func(name string, def int64) int64 {
		v, ok := os.LookupEnv(name)
		if !ok {
			return def
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s=%q: not an integer", name, v))
			return def
		}
		return n
	}
	boolEnv := func(name string, def bool) bool {
		v, ok := os.LookupEnv(name)
		if !ok {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s=%q: not a boolean", name, v))
			return def
		}
		return b
	}
	static := ""
	if st, err := os.Stat("client/dist/index.html"); err == nil && !st.IsDir() {
		static = "client/dist"
	}
	fs.StringVar(&c.HTTPAddr, "http-addr", envString("STAMPEDE_HTTP_ADDR", "127.0.0.1:8080"), "gateway listen address")
	fs.StringVar(&c.RedisAddr, "redis-addr", envString("STAMPEDE_REDIS_ADDR", "127.0.0.1:6379"), "Redis host:port; comma-separated list = Redis Cluster")
	fs.IntVar(&c.RedisDB, "redis-db", int(intEnv("STAMPEDE_REDIS_DB", 0)), "Redis database number (ignored on a cluster)")
	fs.StringVar(&c.MySQLDSN, "mysql-dsn", envString("STAMPEDE_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/stampede?parseTime=true"), "MySQL DSN")
	fs.StringVar(&c.AMQPURL, "amqp-url", envString("STAMPEDE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL")
	fs.StringVar(&c.JWTSecret, "jwt-secret", envString("STAMPEDE_JWT_SECRET", devJWTSecret), "HS256 key of bearer tokens")
	fs.StringVar(&c.PaymentSecret, "payment-secret", envString("STAMPEDE_PAYMENT_SECRET", devPaymentSecret), "HMAC-SHA256 key of payment callbacks")
	fs.DurationVar(&c.PayTimeout, "pay-timeout", durEnv("STAMPEDE_PAY_TIMEOUT", 15*time.Minute), "time to pay before an order is cancelled")
	fs.BoolVar(&c.DemoLogin, "demo-login", boolEnv("STAMPEDE_DEMO_LOGIN", true), "enable the demo identity provider POST /api/auth/login")
	fs.StringVar(&c.AdminUsers, "admin-users", envString("STAMPEDE_ADMIN_USERS", ""), "comma-separated userIds that demo login makes admins")
	fs.StringVar(&c.Roles, "roles", envString("STAMPEDE_ROLES", strings.Join(allRoles, ",")), "comma-separated roles: "+strings.Join(allRoles, ","))
	fs.Int64Var(&c.NodeID, "node-id", intEnv("STAMPEDE_NODE_ID", -1), "orderNo node id 0..1023, -1 = random")
	fs.IntVar(&c.WriterBatch, "writer-batch", int(intEnv("STAMPEDE_WRITER_BATCH", 500)), "reservations per writer transaction")
	fs.DurationVar(&c.WriterWait, "writer-wait", durEnv("STAMPEDE_WRITER_WAIT", 20*time.Millisecond), "longest wait to fill a writer batch")
	fs.IntVar(&c.ConsumerWorkers, "consumer-workers", int(intEnv("STAMPEDE_CONSUMER_WORKERS", 8)), "concurrent messages per consumer queue")
	fs.IntVar(&c.ConsumerPrefetch, "consumer-prefetch", int(intEnv("STAMPEDE_CONSUMER_PREFETCH", 64)), "AMQP prefetch per consumer queue")
	fs.IntVar(&c.RelayBatch, "relay-batch", int(intEnv("STAMPEDE_RELAY_BATCH", 500)), "outbox rows claimed per relay round")
	fs.DurationVar(&c.SweepInterval, "sweep-interval", durEnv("STAMPEDE_SWEEP_INTERVAL", time.Second), "sweeper period")
	fs.StringVar(&c.PushAddr, "push-addr", envString("STAMPEDE_PUSH_ADDR", "127.0.0.1:8081"), "push WebSocket listen address")
	fs.StringVar(&c.PushURL, "push-url", envString("STAMPEDE_PUSH_URL", ""), "WebSocket URL given to browsers (empty: ws://<host>:<push port>/ws)")
	fs.StringVar(&c.StaticDir, "static-dir", envString("STAMPEDE_STATIC_DIR", static), "built client files served at /")
	fs.StringVar(&c.LogLevel, "log-level", envString("STAMPEDE_LOG_LEVEL", "info"), "debug, info, warn or error")
	fs.BoolVar(&c.Migrate, "migrate", boolEnv("STAMPEDE_MIGRATE", false), "apply migrations at start-up")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", durEnv("STAMPEDE_SHUTDOWN_TIMEOUT", 20*time.Second), "bound on draining at SIGTERM")
}

// Validate returns "invalid config: ..." for settings that cannot work.
func (c *Config) Validate() error {
	var errs []error
	if c.PayTimeout < time.Second {
		errs = append(errs, fmt.Errorf("pay timeout %s is under 1s", c.PayTimeout))
	}
	if c.NodeID < -1 || c.NodeID > 1023 {
		errs = append(errs, fmt.Errorf("node id %d is outside -1..1023", c.NodeID))
	}
	if c.WriterBatch < 1 || c.WriterBatch > 5000 {
		errs = append(errs, fmt.Errorf("writer batch %d is outside 1..5000", c.WriterBatch))
	}
	if c.ConsumerWorkers < 1 || c.ConsumerPrefetch < 1 || c.RelayBatch < 1 {
		errs = append(errs, errors.New("consumer workers, consumer prefetch and relay batch must be >= 1"))
	}
	if _, err := c.roleSet(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.adminIDs(); err != nil {
		errs = append(errs, err)
	}
	if c.JWTSecret == "" || c.PaymentSecret == "" {
		errs = append(errs, errors.New("jwt and payment secrets must not be empty"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid config: %w", errors.Join(errs...))
	}
	return nil
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

func (c *Config) redisAddrs() []string {
	var out []string
	for _, a := range strings.Split(c.RedisAddr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
