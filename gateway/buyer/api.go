// Package buyer is the buyer's half of Stampede's HTTP API (docs/spec.md §3): the
// demo login (login.go), order reads (orderread.go), cancel
// (ordercancel.go), demo checkout and the provider's signed callback
// (payments.go), the product listing (products.go) — and, mounted with
// them, the order intake (package intake, POST /api/orders) and the
// waiting room's routes (package room).
//
// It shares with the operator's API only package httpapi (answers,
// decoder, authentication, the product cache) and package room; the
// gateway builds both APIs and mounts them on one listener. The order
// intake is a package of its own because it holds no MySQL code; the MySQL
// read and write it may need are this package's (mysql.go), wired into it
// by New.
package buyer

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/buyer/intake"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/gateway/room"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// Config are the buyer's API's settings (the gateway's Config).
type Config struct {
	MaxBodyBytes        int           // request bodies over it answer 413
	StoreTimeout        time.Duration // one MySQL call
	RequestTTL          time.Duration // lifetime of a request's idempotency record
	PaymentSecret       []byte        // the payment callback's HMAC key
	TokenTTL            time.Duration // the demo login's tokens
	DisableDemoLogin    bool          // POST /api/auth/login is unknown (404)
	DisableDemoCheckout bool          // POST /api/orders/{orderNo}/pay is unknown (404)
	AdminUsers          []int64       // the demo login's admins
	// The per-user bucket of order reads (0: none).
	RateUserRead      float64
	RateUserReadBurst int
	Intake            intake.Config // POST /api/orders
	Room              room.Config   // the waiting room
}

// Deps are what the buyer's API runs on. Every field is required.
type Deps struct {
	Store    *persistence.Store
	Redis    redis.UniversalClient
	Products *httpapi.ProductCache
	Answers  *httpapi.Answers
	Log      *slog.Logger
	Signer   auth.Signer // the demo login's tokens
	Metrics  intake.Metrics
	Gen      *order.NoGenerator
	// NodeValid is false while this gateway holds no orderNo node id of its own.
	NodeValid func(now time.Time) bool
	// RedisCall runs one Redis call under the gateway's timeout and breaker.
	RedisCall func(fn func(ctx context.Context) error) error
}

// API serves the buyer's routes. Create it with New; it is safe for
// concurrent use.
type API struct {
	cfg       Config
	store     *persistence.Store
	rdb       redis.UniversalClient
	products  *httpapi.ProductCache
	ans       *httpapi.Answers
	log       *slog.Logger
	signer    auth.Signer
	admins    map[int64]bool
	redisCall func(fn func(ctx context.Context) error) error
	reads     *httpapi.RateLimiter // per-user order reads; nil: no limit (orderread.go)
	intake    *intake.Intake       // POST /api/orders
	room      *room.Room           // the waiting room
}

// New returns the buyer's API of cfg on d, with its order intake and its
// waiting room. It does no I/O.
func New(cfg Config, d Deps) *API {
	s := &API{cfg: cfg, store: d.Store, rdb: d.Redis, products: d.Products, ans: d.Answers, log: d.Log,
		signer: d.Signer, admins: make(map[int64]bool, len(cfg.AdminUsers)), redisCall: d.RedisCall,
		reads: httpapi.NewRateLimiter(0, 0, cfg.RateUserRead, cfg.RateUserReadBurst)}
	for _, id := range cfg.AdminUsers {
		s.admins[id] = true
	}
	s.intake = intake.New(cfg.Intake, intake.Deps{Redis: d.Redis, Answers: d.Answers, Log: d.Log, Metrics: d.Metrics,
		Gen: d.Gen, NodeValid: d.NodeValid, RedisCall: d.RedisCall, ProductShards: s.productShards,
		PersistSync: s.persistSync,
		Reserve: func(productID int64, shards, home int, args lua.ReserveArgs) (lua.ReserveResult, bool, error) {
			return s.room.Reserve(productID, shards, home, args) // the room's admission first
		}})
	s.room = room.New(cfg.Room, room.Deps{Redis: d.Redis, Stock: s.intake.Stock(), Answers: d.Answers, Log: d.Log,
		RedisCall: d.RedisCall, ShardCount: s.intake.ShardCount,
		Limit: s.intake.Allow}) // tickets share the order path's bucket
	return s
}

// Intake is the order intake (POST /api/orders).
func (s *API) Intake() *intake.Intake { return s.intake }

// Room is the waiting room.
func (s *API) Room() *room.Room { return s.room }

// Start runs the background work of the order intake and the waiting room
// until ctx ends; the channel closes once it stopped.
func (s *API) Start(ctx context.Context) <-chan struct{} {
	in, rm := s.intake.Start(ctx), s.room.Start(ctx)
	done := make(chan struct{})
	go func() {
		<-in
		<-rm
		close(done)
	}()
	return done
}

// Mount registers the buyer's routes: handle wraps each handler (the
// gateway's per-route metrics), guard verifies the caller.
func (s *API) Mount(handle func(method, path string, h fasthttp.RequestHandler), guard *httpapi.Guard) {
	authed := guard.Authed
	if !s.cfg.DisableDemoLogin { // otherwise the path is unknown: 404
		handle("POST", "/api/auth/login", s.login)
	}
	s.intake.Mount(handle, authed) // package intake: POST /api/orders
	handle("GET", "/api/orders", authed(s.listOrders))
	handle("GET", "/api/orders/{orderNo}", authed(s.getOrder))
	handle("POST", "/api/orders/{orderNo}/cancel", authed(s.cancelOrder))
	if !s.cfg.DisableDemoCheckout { // otherwise the path is unknown: 404
		handle("POST", "/api/orders/{orderNo}/pay", authed(s.demoPay))
	}
	handle("POST", "/api/payments/callback", s.paymentCallback)

	handle("GET", "/api/products", s.listProducts)
	handle("GET", "/api/products/{id}", s.getProduct)
	s.room.Mount(handle, authed) // package room: tickets, challenges, drops
}

// callCtx returns the context for one dependency call of a handler.
func (s *API) callCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
