// Package intake is the buyer's order intake, POST /api/orders: the hot
// path of a sale (docs/spec.md §3). The caller's token buckets, the strict body
// decoder, the local sold-out cache with its copies of the buyers of
// sold-out shards and its pipelined record lookups, the shard routing of
// hot-SKU sharding, one reserve.lua call (batched with other requests'
// when Config.ReservePipeline is on) through the waiting room's admission
// (package room), the replicated-durability wait, and the synchronous
// intake baseline.
//
// It holds no MySQL code (a lint rule checks its imports): the two reads and
// the one write it may need of MySQL — the shard count of a product Redis
// does not list, and synchronous intake's transaction — come in as
// functions (Deps.ProductShards, Deps.PersistSync) that the gateway wires to
// the product cache and the store. It never blocks on RabbitMQ.
package intake

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
)

// Config are the order path's settings (the gateway's Config).
type Config struct {
	MaxBodyBytes    int           // request bodies over it answer 413
	RequestTTL      time.Duration // lifetime of a request's idempotency record
	SyncIntake      bool          // write each order to MySQL before the answer (Deps.PersistSync)
	SoldOutTTL      time.Duration // how long a product stays marked sold out
	SoldOutBuyers   int           // buyers kept per sold-out shard; 0: none
	ReservePipeline int           // reserve calls per pipeline; ≤ 1: one round trip each
	LookupPipeline  int           // record lookups per pipeline; ≤ 1: one round trip each
	// Replicated: wait for ReplicaAcks replicas (at most ReplicaWait)
	// before the answer (durability replicated).
	Replicated  bool
	ReplicaAcks int
	ReplicaWait time.Duration
	// The token buckets in front of the order path (0: none).
	RateGlobal      float64
	RateGlobalBurst int
	RateUser        float64
	RateUserBurst   int
}

// Metrics are the order path's series (the gateway's *Metrics).
type Metrics interface {
	ReserveOutcome(err error)               // one answer of POST /api/orders (nil: accepted)
	ReserveRateLimited()                    // one 429 of the order path's buckets
	ProductSeen(productID int64)            // a product's series exist from its first order
	StockCorrupt(productID int64)           // an answer STOCK_CORRUPT
	ReplicaWait(err error, d time.Duration) // one WAIT of durability replicated
	LuaCall(seconds float64)                // one reserve.lua call
}

// Deps are what the order path runs on. Every field is required but
// PersistSync, which only synchronous intake needs.
type Deps struct {
	Redis   redis.UniversalClient
	Answers *httpapi.Answers
	Log     *slog.Logger
	Metrics Metrics
	Gen     *order.NoGenerator // orderNos and transfer ids
	// NodeValid is false while this gateway holds no orderNo node id of its own.
	NodeValid func(now time.Time) bool
	// RedisCall runs one Redis call under the gateway's timeout and breaker.
	RedisCall func(fn func(ctx context.Context) error) error
	// Reserve is the waiting room's reserve (room.Room.Reserve): one
	// reserve.lua call on the stock (Stock), with the room's admission.
	Reserve func(productID int64, shards, home int, args lua.ReserveArgs) (lua.ReserveResult, bool, error)
	// ProductShards is the shard count of a product that Redis does not
	// list, from MySQL's product table (httpapi.ErrProductNotFound).
	ProductShards func(productID int64) (int, error)
	// PersistSync writes one accepted reservation to MySQL (synchronous
	// intake); nil means committed.
	PersistSync func(r order.Reservation) error
}

// Intake serves POST /api/orders. Create it with New; it is safe for
// concurrent use.
type Intake struct {
	cfg           Config
	rdb           redis.UniversalClient
	ans           *httpapi.Answers
	log           *slog.Logger
	metrics       Metrics
	gen           *order.NoGenerator
	nodeValid     func(now time.Time) bool
	redisCall     func(fn func(ctx context.Context) error) error
	reserve       func(productID int64, shards, home int, args lua.ReserveArgs) (lua.ReserveResult, bool, error)
	productShards func(productID int64) (int, error)
	persist       func(r order.Reservation) error
	limiter       *httpapi.RateLimiter // nil: no rate limits
	stock         *lua.Sharded         // the multi-shard operations, run under redisCall (shards.go)
	batcher       *reserveBatcher      // nil: one round trip per reserve call
	lookups       *lookupBatcher       // nil: one round trip per request-record lookup
	durable       *durableWaiter       // nil: no wait for replicas
	soldOut       soldOutCache
	buyers        buyerCache // buyers.go
	routing       routeCache
	corrupt       corruptLog // stockfault.go
}

// New returns the order path of cfg on d. It does no I/O.
func New(cfg Config, d Deps) *Intake {
	s := &Intake{cfg: cfg, rdb: d.Redis, ans: d.Answers, log: d.Log, metrics: d.Metrics, gen: d.Gen,
		nodeValid: d.NodeValid, redisCall: d.RedisCall, reserve: d.Reserve, productShards: d.ProductShards,
		persist: d.PersistSync,
		limiter: httpapi.NewRateLimiter(cfg.RateGlobal, cfg.RateGlobalBurst, cfg.RateUser, cfg.RateUserBurst)}
	s.soldOut.ttl = cfg.SoldOutTTL
	s.buyers.ttl, s.buyers.max = cfg.SoldOutTTL, cfg.SoldOutBuyers
	if cfg.ReservePipeline > 1 {
		s.batcher = newReserveBatcher(s, cfg.ReservePipeline)
	}
	if cfg.LookupPipeline > 1 {
		s.lookups = newLookupBatcher(s, cfg.LookupPipeline)
	}
	if cfg.Replicated && !cfg.SyncIntake {
		s.durable = newDurableWaiter(s, cfg.ReplicaAcks, cfg.ReplicaWait)
	}
	s.stock = s.newSharded()
	return s
}

// Stock is the order path's sharded stock (lua.Sharded): its reservations
// go through the reserve batcher, its calls through the breaker. The
// waiting room reserves with it; the operator loads products with it.
func (s *Intake) Stock() *lua.Sharded { return s.stock }

// Start runs the order path's background work (the reserve and lookup
// batchers, the replica waits) until ctx ends; the channel closes once it
// stopped and the buyer-set reads in flight returned.
func (s *Intake) Start(ctx context.Context) <-chan struct{} {
	var done []<-chan struct{}
	if s.batcher != nil {
		done = append(done, s.batcher.Start(ctx)) // reserve_batch.go
	}
	if s.lookups != nil {
		done = append(done, s.lookups.Start(ctx)) // lookup_batch.go
	}
	if s.durable != nil {
		done = append(done, s.durable.start(ctx)) // durability.go
	}
	out := make(chan struct{})
	go func() {
		<-ctx.Done()
		for _, d := range done {
			<-d
		}
		s.buyers.wg.Wait() // buyers.go: reads in flight
		close(out)
	}()
	return out
}

// Mount registers POST /api/orders: handle wraps the handler (the
// gateway's per-route metrics), authed verifies the caller.
func (s *Intake) Mount(handle func(method, path string, h fasthttp.RequestHandler),
	authed func(next httpapi.AuthedHandler) fasthttp.RequestHandler) {
	handle("POST", "/api/orders", authed(s.createOrder))
}

// Allow takes a token of userID's order-path bucket (tickets share it);
// false: it answered 429 RATE_LIMITED.
func (s *Intake) Allow(ctx *fasthttp.RequestCtx, userID int64) bool {
	if s.limiter == nil {
		return true
	}
	ok, wait := s.limiter.Allow(userID, time.Now())
	if !ok {
		s.rateLimited(ctx, wait)
	}
	return ok
}

// rateLimited answers 429 RATE_LIMITED with Retry-After in whole seconds
// (at least 1) and counts it.
func (s *Intake) rateLimited(ctx *fasthttp.RequestCtx, wait time.Duration) {
	s.metrics.ReserveRateLimited()
	httpapi.TooMany(ctx, wait)
}

// SoldOut tells whether the local sold-out cache holds productID sold out
// at now.
func (s *Intake) SoldOut(productID int64, now time.Time) bool { return s.soldOut.hit(productID, now) }

// NonBuyer tells whether userID is known, at now, to hold no accepted
// reservation on the sold-out shard of productID (buyers.go).
func (s *Intake) NonBuyer(productID int64, shard int, userID int64, now time.Time) bool {
	return s.nonBuyer(productID, shard, userID, now)
}
