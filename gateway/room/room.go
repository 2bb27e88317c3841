// Package room is the gateway's side of the waiting room (lua/waitingroom.go
// and lua/admission.go hold the Redis side; pipeline/pacer.go admits):
// tickets (POST /api/products/{id}/queue, waitingroom.go), the
// proof-of-work gate in front of them (pow.go), the public record of a
// drop's shuffle (GET /api/products/{id}/drop and …/drop/tickets,
// drop.go), and the admission on the order path (Reserve: a one-shard
// product's admission check inside reserve.lua, a sharded product's
// admission saga, lua.AdmissionSaga, which alone holds the cross-slot
// protocol of claim, reserve and give back).
//
// The buyer's API mounts its routes and calls Reserve; the operator's API
// reads a room (Read) and tells it of a room it turned on or off (Seen).
// It touches Redis only, never MySQL: a room's stored terms are the
// operator's (gateway/operator/room.go).
package room

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
)

// Config are the room's settings (the gateway's Config).
type Config struct {
	MaxBodyBytes  int           // request bodies over it answer 413
	PowSecret     []byte        // the proof-of-work HMAC key; empty: derived from PaymentSecret
	PaymentSecret []byte        // see PowSecret
	PowExpiry     time.Duration // how long a challenge may be solved
	RoomPipeline  int           // tickets taken in one Redis call; ≤ 1: one call each
}

// Deps are what the room runs on. Every field but Limit is required.
type Deps struct {
	Redis   redis.UniversalClient
	Stock   *lua.Sharded // the order path's reservations (batched and timed)
	Answers *httpapi.Answers
	Log     *slog.Logger
	// RedisCall runs one Redis call under the gateway's timeout and breaker.
	RedisCall func(fn func(ctx context.Context) error) error
	// ShardCount is a product's number of stock shards (404 for an
	// unknown product).
	ShardCount func(productID int64) (int, error)
	// Limit takes a token of the user's order-path bucket; false: it
	// answered 429. Nil: no limit.
	Limit func(ctx *fasthttp.RequestCtx, userID int64) bool
}

// Room is the gateway's waiting room. Create it with New; it is safe for
// concurrent use.
type Room struct {
	cfg        Config
	rdb        redis.UniversalClient
	stock      *lua.Sharded
	ans        *httpapi.Answers
	log        *slog.Logger
	redisCall  func(fn func(ctx context.Context) error) error
	shardCount func(productID int64) (int, error)
	limit      func(ctx *fasthttp.RequestCtx, userID int64) bool
	hints      roomHints          // the products whose room this gateway saw on
	takes      *takeBatcher       // nil: one round trip per ticket
	pow        powGate            // pow.go
	lists      sync.Map           // int64 → []byte: published pre-queue lists (drop.go)
	admissions *lua.AdmissionSaga // a sharded room product's orders
}

// New returns the room of cfg on d. It does no I/O.
func New(cfg Config, d Deps) *Room {
	s := &Room{cfg: cfg, rdb: d.Redis, stock: d.Stock, ans: d.Answers, log: d.Log, redisCall: d.RedisCall,
		shardCount: d.ShardCount, limit: d.Limit}
	if cfg.RoomPipeline > 1 {
		s.takes = newTakeBatcher(s, cfg.RoomPipeline)
	}
	s.pow = newPowGate(cfg.PowSecret, cfg.PaymentSecret, cfg.PowExpiry)
	s.admissions = s.newAdmissionSaga()
	return s
}

// Start runs the ticket batcher until ctx ends; the channel closes when it
// has stopped (at once without one).
func (s *Room) Start(ctx context.Context) <-chan struct{} {
	if s.takes == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return s.takes.Start(ctx)
}

// Mount registers the buyer's room routes: handle wraps each handler (the
// gateway's per-route metrics), authed verifies the caller.
func (s *Room) Mount(handle func(method, path string, h fasthttp.RequestHandler),
	authed func(next httpapi.AuthedHandler) fasthttp.RequestHandler) {
	handle("POST", "/api/products/{id}/queue", authed(s.takePlace))
	handle("GET", "/api/products/{id}/queue/challenge", authed(s.queueChallenge)) // pow.go
	handle("GET", "/api/products/{id}/drop", s.dropInfo)                          // drop.go
	handle("GET", "/api/products/{id}/drop/tickets", s.dropTickets)
}

// Seen records that productID's room is on or off (an operator just set
// it), so that the next order of this gateway needs no extra round trip.
func (s *Room) Seen(productID int64, on bool) { s.hints.set(productID, on) }
