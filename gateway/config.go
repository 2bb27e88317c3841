package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/order"
)

// Config configures a gateway Server. A zero duration, size or address means
// "use the default"; the two secrets are required. New applies the defaults
// and calls Validate.
type Config struct {
	// Addr is the TCP address Run listens on. Default "127.0.0.1:8080".
	Addr string

	// JWTSecret signs the demo login's tokens and, without a Verifier,
	// verifies bearer tokens (HS256). Required unless a Verifier is set and
	// the demo login is off (production with an identity provider only);
	// push and the load generator must use the same secret.
	JWTSecret []byte
	// Signer makes the demo login's tokens. Nil: auth.Signer{Secret:
	// JWTSecret} (the default HS256 issuer and audience).
	Signer *auth.Signer
	// PaymentSecret is the HMAC-SHA256 key of payment callbacks (the
	// X-Signature header) and of the demo checkout. Required.
	PaymentSecret []byte

	// DisableDemoLogin turns off POST /api/auth/login, the demo identity
	// provider that issues a token for any positive userId (it then answers
	// 404). Default false: the demo login is on, as docs/spec.md §3 wants
	// (STAMPEDE_DEMO_LOGIN=false sets this). A field named DemoLogin could not
	// default to true, since false is also its zero value.
	DisableDemoLogin bool
	// AdminUsers are the user ids that the demo login gives role admin.
	// Default none.
	AdminUsers []int64
	// DisableDemoCheckout leaves out POST /api/orders/{orderNo}/pay, the
	// demo checkout that pays an order without a payment provider (it then
	// answers 404 like any unknown path). Production mode sets it.
	DisableDemoCheckout bool

	// Verifier checks bearer tokens. Nil: HS256 tokens signed with
	// JWTSecret only (auth.NewVerifier). Set it to also accept an identity
	// provider's tokens (an *auth.Verifier from auth.New with a JWKS URL).
	Verifier TokenVerifier
	// TokenTTL is the life of a token issued by the demo login, at most
	// auth.MaxTokenTTL; an admin's token lives at most auth.MaxAdminTokenTTL.
	// Default 24h.
	TokenTTL time.Duration

	// PayTimeout is how long an order may wait for payment (docs/spec.md §7,
	// STAMPEDE_PAY_TIMEOUT). The gateway uses it only to check RequestTTL.
	// Default 15m.
	PayTimeout time.Duration
	// RequestTTL is the life of the idempotency record of (user, product,
	// requestId) and of the pending order record in Redis, whole seconds. It
	// must be at least PayTimeout and equal the writers' RequestTTL. After it
	// the same requestId is a new intent. Default order.DefaultRequestTTL (24h).
	RequestTTL time.Duration

	// NodeID is the orderNo node id, 0…1023; two live gateways must not share
	// one. -1 leases a free id from Redis when Serve starts and renews it
	// (NodeLease); until a lease is held, orders answer 503. Default 0.
	NodeID int
	// NodeLeaseTTL is the life of a node lease without renewal (NodeID -1);
	// it is renewed every third of it. Default 30s, at least 3s.
	NodeLeaseTTL time.Duration

	// MaxBodyBytes is the largest request body accepted, in bytes; larger
	// bodies answer 400 INVALID_ARGUMENT. Default 4096.
	MaxBodyBytes int

	// RedisTimeout bounds every Redis call made for one request. Default 1s.
	RedisTimeout time.Duration
	// StoreTimeout bounds every MySQL call made for one request. Default 3s.
	StoreTimeout time.Duration
	// BreakerFailures is the number of consecutive failed Redis calls that
	// opens the circuit breaker; while it is open Redis-backed endpoints
	// answer 503 UNAVAILABLE at once. Default 5.
	BreakerFailures int
	// BreakerOpen is how long the breaker stays open before it lets one probe
	// call through; it is also the Retry-After of those 503s (rounded up to
	// whole seconds). Default 1s.
	BreakerOpen time.Duration

	// RateGlobal is the refill rate, requests/s, of the token bucket every
	// order request of this gateway instance takes from; RateGlobalBurst its
	// size (default: one second's worth). 0: no global limit (the default).
	RateGlobal      float64
	RateGlobalBurst int
	// RateUser is the refill rate, requests/s, of each user's own token
	// bucket for order requests; RateUserBurst its size (default: two
	// seconds' worth). 0: no per-user limit. A refused request answers 429
	// RATE_LIMITED with Retry-After.
	RateUser      float64
	RateUserBurst int
	// RateUserRead is the refill rate, requests/s, of each user's token
	// bucket for order reads (GET /api/orders, GET /api/orders/{orderNo}:
	// MySQL queries), a bucket of its own; RateUserReadBurst its size
	// (default: two seconds' worth). 0: no limit (the default here; the
	// binary's is STAMPEDE_RATE_USER_READ). 429 RATE_LIMITED past it.
	RateUserRead      float64
	RateUserReadBurst int

	// SoldOutTTL is how long a product that answered SOLD_OUT is answered
	// from memory (buyer/intake/soldout.go); it bounds the delay before returned stock
	// sells again. 0: no sold-out cache.
	SoldOutTTL time.Duration
	// SoldOutBuyers, above 0, lets a sold-out cache hit of a user without an
	// accepted intent in the product shard be answered from memory, by a copy
	// of the shard's buyers set of up to this many members (buyer/intake/buyers.go);
	// larger sets, and 0, leave every hit to the request-record lookup.
	// Default 0 here; the binary's default is STAMPEDE_SOLDOUT_BUYERS.
	SoldOutBuyers int

	// RoomWindow is how long a waiting-room admission lasts when the room
	// is turned on without its own window (operator/room.go). Default 2m.
	RoomWindow time.Duration
	// RoomPipeline, above 1, answers the ticket calls (POST
	// /api/products/{id}/queue) of up to this many concurrent requests
	// with one room_take.lua call per product (room/waitingroom.go,
	// lua.TakeMany); 0 or 1: one call and round trip each (the default
	// here; the binary's is STAMPEDE_ROOM_PIPELINE).
	RoomPipeline int
	// PowSecret is the HMAC key of proof-of-work challenges (room/pow.go); every
	// gateway of a deployment needs the same. Empty: one derived from
	// PaymentSecret (never from JWTSecret: a JWKS-only deployment has none).
	PowSecret []byte
	// PowExpiry is how long a proof-of-work challenge can be used. Default 5m.
	PowExpiry time.Duration

	// ReservePipeline, above 1, sends the reserve calls of concurrent
	// requests to Redis in pipelines of up to this many (buyer/intake/reserve_batch.go).
	// 0 or 1: one round trip per call (the default).
	ReservePipeline int

	// LookupPipeline, above 1, sends the request-record GETs of concurrent
	// sold-out cache hits to Redis in pipelines of up to this many
	// (buyer/intake/lookup_batch.go); 0 or 1: one round trip each. Default 0 here; the
	// binary's default is STAMPEDE_LOOKUP_PIPELINE.
	LookupPipeline int

	// Durability is what a reservation must reach in Redis before its 202
	// (durability.go): DurabilityNone (the default, also ""), DurabilityAOF
	// (the same at request time; the caller checks the servers with
	// CheckDurability) or DurabilityReplicated (WAIT for ReplicaAcks
	// replicas, at most ReplicaWait, else 503). Only the stream intake waits.
	Durability Durability
	// ReplicaAcks is the number of replicas that must acknowledge a
	// reservation with DurabilityReplicated. Default 1.
	ReplicaAcks int
	// ReplicaWait bounds that wait (the WAIT timeout). Default 100ms.
	ReplicaWait time.Duration

	// SyncIntake writes each accepted order to MySQL within its request
	// instead of the intake stream (STAMPEDE_INTAKE=sync, sync_intake.go).
	SyncIntake bool

	// ProductCacheTTL is how long product rows read from MySQL are reused by
	// the product endpoints. Default 1s.
	ProductCacheTTL time.Duration

	// ReadTimeout, WriteTimeout and IdleTimeout are the server's connection
	// timeouts. Defaults 10s, 10s and 60s.
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	IdleTimeout  time.Duration
	// ShutdownTimeout bounds the graceful shutdown of Run. Default 10s.
	ShutdownTimeout time.Duration
	// ReadyTimeout bounds one /readyz check. Default 2s.
	ReadyTimeout time.Duration
	// RedisCheckInterval is how often a serving gateway re-reads Redis's
	// maxmemory-policy and persistence settings (redischeck.go); an unsafe
	// policy makes it not ready. Default 10s.
	RedisCheckInterval time.Duration

	// ReadyCheck, if set, is run by Ready after the Redis and MySQL checks
	// (for example a RabbitMQ check wired by the main package). Its error
	// message should name the dependency.
	ReadyCheck func(ctx context.Context) error

	// Ops serves the admin reconcile and dead-letter endpoints
	// (pipeline.Ops). Nil: they answer 503 UNAVAILABLE.
	Ops AdminOps

	// Metrics receives the gateway's Prometheus series (see Metrics). Nil:
	// private, unregistered collectors.
	Metrics *Metrics

	// PushURL is the push WebSocket URL given to browsers by GET
	// /api/config and allowed by the client's Content-Security-Policy.
	// Empty: with PushURLFromHost, ws://<request host>:<port of PushAddr>/ws;
	// without, /api/config names no URL and the client uses its fallback
	// (ws[s]://<its own host>:8081/ws).
	PushURL string
	// PushAddr is the push role's listen address; its port completes the
	// push URL when PushURL is empty.
	PushAddr string
	// PushURLFromHost builds the push URL from the request's Host header
	// when PushURL is empty (development mode). Off, /api/config never
	// echoes a client-chosen Host.
	PushURLFromHost bool
	// Currency is the ISO 4217 code of every price and amount (integer minor
	// units of it), given to browsers by GET /api/config. Default "USD".
	Currency string

	// StaticDir is an optional folder of built client files served at /; a
	// path without a file extension that matches no file gets index.html
	// (single-page app fallback). Empty: nothing is served outside /api.
	StaticDir string
}

// Defaults (see the field docs of Config).
const (
	DefaultAddr         = "127.0.0.1:8080"
	DefaultMaxBodyBytes = 4096
	DefaultCurrency     = "USD"
)

func (c *Config) setDefaults() {
	c.Addr = cmp.Or(c.Addr, DefaultAddr)
	c.Currency = cmp.Or(c.Currency, DefaultCurrency)
	c.TokenTTL = cmp.Or(c.TokenTTL, 24*time.Hour)
	c.PayTimeout = cmp.Or(c.PayTimeout, 15*time.Minute)
	c.RequestTTL = cmp.Or(c.RequestTTL, order.DefaultRequestTTL)
	c.RoomWindow = cmp.Or(c.RoomWindow, 2*time.Minute)
	c.PowExpiry = cmp.Or(c.PowExpiry, 5*time.Minute)
	c.NodeLeaseTTL = cmp.Or(c.NodeLeaseTTL, 30*time.Second)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.RedisTimeout = cmp.Or(c.RedisTimeout, time.Second)
	c.StoreTimeout = cmp.Or(c.StoreTimeout, 3*time.Second)
	c.BreakerFailures = cmp.Or(c.BreakerFailures, 5)
	c.BreakerOpen = cmp.Or(c.BreakerOpen, time.Second)
	c.ProductCacheTTL = cmp.Or(c.ProductCacheTTL, time.Second)
	if c.RateGlobal > 0 && c.RateGlobalBurst == 0 {
		c.RateGlobalBurst = int(max(c.RateGlobal, 1))
	}
	if c.RateUser > 0 && c.RateUserBurst == 0 {
		c.RateUserBurst = int(max(2*c.RateUser, 1))
	}
	if c.RateUserRead > 0 && c.RateUserReadBurst == 0 {
		c.RateUserReadBurst = int(max(2*c.RateUserRead, 1))
	}
	c.ReadTimeout = cmp.Or(c.ReadTimeout, 10*time.Second)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, 10*time.Second)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, time.Minute)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 10*time.Second)
	c.ReadyTimeout = cmp.Or(c.ReadyTimeout, 2*time.Second)
	c.RedisCheckInterval = cmp.Or(c.RedisCheckInterval, 10*time.Second)
	c.Durability = cmp.Or(c.Durability, DurabilityNone)
	c.ReplicaAcks = cmp.Or(c.ReplicaAcks, 1)
	c.ReplicaWait = cmp.Or(c.ReplicaWait, 100*time.Millisecond)
}

// Validate reports the first problem of c as "invalid config: ...". It
// expects defaults to have been applied (New does both).
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return errors.New("invalid config: " + fmt.Sprintf(format, args...))
	}
	switch {
	case len(c.JWTSecret) == 0 && (c.Verifier == nil || !c.DisableDemoLogin):
		return bad("JWTSecret is empty (it is needed without a Verifier and by the demo login)")
	case len(c.PaymentSecret) == 0:
		return bad("PaymentSecret is empty")
	case c.TokenTTL < time.Second || c.TokenTTL > auth.MaxTokenTTL:
		return bad("TokenTTL %v is outside 1s..%v", c.TokenTTL, auth.MaxTokenTTL)
	case c.PayTimeout < time.Second:
		return bad("PayTimeout %v is below 1s", c.PayTimeout)
	case c.RequestTTL < c.PayTimeout:
		return bad("RequestTTL %v is shorter than PayTimeout %v", c.RequestTTL, c.PayTimeout)
	case c.NodeID < -1 || c.NodeID > 1023:
		return bad("NodeID %d is outside 0..1023 (or -1 for a leased one)", c.NodeID)
	case c.NodeID < 0 && c.NodeLeaseTTL < 3*time.Second:
		return bad("NodeLeaseTTL %v is below 3s", c.NodeLeaseTTL)
	case c.MaxBodyBytes < 256:
		return bad("MaxBodyBytes %d is below 256", c.MaxBodyBytes)
	case c.RedisTimeout < 0, c.StoreTimeout < 0, c.BreakerOpen < 0, c.ProductCacheTTL < 0, c.ReadTimeout < 0,
		c.WriteTimeout < 0, c.IdleTimeout < 0, c.ShutdownTimeout < 0, c.ReadyTimeout < 0, c.RedisCheckInterval < 0:
		return bad("negative duration")
	case c.ReservePipeline < 0 || c.ReservePipeline > 1024:
		return bad("ReservePipeline %d is outside 0..1024", c.ReservePipeline)
	case c.LookupPipeline < 0 || c.LookupPipeline > 1024:
		return bad("LookupPipeline %d is outside 0..1024", c.LookupPipeline)
	case c.RoomPipeline < 0 || c.RoomPipeline > 1024:
		return bad("RoomPipeline %d is outside 0..1024", c.RoomPipeline)
	case c.PowExpiry < 10*time.Second:
		return bad("PowExpiry %v is below 10s", c.PowExpiry)
	case c.SoldOutBuyers < 0:
		return bad("SoldOutBuyers %d is negative", c.SoldOutBuyers)
	case c.RateGlobal < 0, c.RateUser < 0, c.RateGlobalBurst < 0, c.RateUserBurst < 0, c.SoldOutTTL < 0,
		c.RateUserRead < 0, c.RateUserReadBurst < 0:
		return bad("negative rate limit, burst or sold-out TTL")
	case c.BreakerFailures < 1:
		return bad("BreakerFailures %d is below 1", c.BreakerFailures)
	case c.ReplicaAcks < 1 || c.ReplicaAcks > 16:
		return bad("ReplicaAcks %d is outside 1..16", c.ReplicaAcks)
	case c.ReplicaWait < time.Millisecond || c.ReplicaWait > 10*time.Second:
		return bad("ReplicaWait %v is outside 1ms..10s", c.ReplicaWait)
	}
	if _, err := ParseDurability(string(c.Durability)); err != nil {
		return bad("%v", err)
	}
	if !validCurrency(c.Currency) {
		return bad("Currency %q is not an ISO 4217 code (three upper-case letters)", c.Currency)
	}
	if err := c.validatePush(); err != nil {
		return err
	}
	for _, id := range c.AdminUsers {
		if id <= 0 {
			return bad("AdminUsers contains non-positive user id %d", id)
		}
	}
	return nil
}
