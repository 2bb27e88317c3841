// Package operator is the operator's half of Stampede's HTTP API: every
// route under /api/admin/ (docs/spec.md §3), each behind the admin role — product
// creation (admin.go), the sale's lifecycle and audit (sale_admin.go), stock
// repairs, reconcile and dead letters (admin_ops.go), the console's pulse
// (admin_pulse.go), order search and refunds (admin_support.go) and the
// waiting room's settings and status (room.go).
//
// It shares with the buyer's API only package httpapi (answers, decoder,
// authentication, the product cache) and package room (the waiting room);
// the gateway builds both APIs and mounts them on one listener. No buyer
// request runs any of this code.
package operator

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/gateway/room"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// Config are the settings of the operator's API (the gateway's Config).
type Config struct {
	MaxBodyBytes int           // request bodies over it answer 413
	StoreTimeout time.Duration // one MySQL call
	RoomWindow   time.Duration // a new waiting room's admission window
	// Ops serves the reconcile and dead-letter endpoints (pipeline.Ops).
	// Nil: they answer 503 UNAVAILABLE.
	Ops AdminOps
}

// Deps are what the operator's API runs on. Every field is required.
type Deps struct {
	Store    *persistence.Store
	Redis    redis.UniversalClient
	Stock    *lua.Sharded          // loads a new product's stock shards
	Products *httpapi.ProductCache // invalidated on every product change
	Answers  *httpapi.Answers
	Log      *slog.Logger
	// RedisCall runs one Redis call under the gateway's timeout and breaker.
	RedisCall func(fn func(ctx context.Context) error) error
	// Available reads the Redis available counts (and whether the waiting
	// room is on) of products, as the storefront shows them.
	Available func(ps []persistence.Product) ([]int64, []bool, error)
	// PendingOrder is an order accepted in Redis and not yet in MySQL, and
	// its buyer.
	PendingOrder func(no string) (httpapi.OrderJSON, int64, error)
	// Room is the gateway's waiting room (package room).
	Room *room.Room
	// ShardCount is a product's number of stock shards (404 for an
	// unknown product).
	ShardCount func(productID int64) (int, error)
}

// API serves the operator's routes. Create it with New.
type API struct {
	cfg          Config
	store        *persistence.Store
	rdb          redis.UniversalClient
	stock        *lua.Sharded
	products     *httpapi.ProductCache
	ans          *httpapi.Answers
	log          *slog.Logger
	redisCall    func(fn func(ctx context.Context) error) error
	available    func(ps []persistence.Product) ([]int64, []bool, error)
	pendingOrder func(no string) (httpapi.OrderJSON, int64, error)
	room         *room.Room
	shardCount   func(productID int64) (int, error)
}

// New returns the operator's API on d.
func New(cfg Config, d Deps) *API {
	return &API{cfg: cfg, store: d.Store, rdb: d.Redis, stock: d.Stock, products: d.Products, ans: d.Answers,
		log: d.Log, redisCall: d.RedisCall, available: d.Available, pendingOrder: d.PendingOrder, room: d.Room, shardCount: d.ShardCount}
}

// Mount registers the operator's routes on r: handle wraps each handler
// (the gateway's per-route metrics), guard checks the admin role.
func (s *API) Mount(handle func(method, path string, h fasthttp.RequestHandler), guard *httpapi.Guard) {
	admin := guard.AdminOnly
	handle("POST", "/api/admin/products", admin(s.createProduct))
	handle("GET", "/api/admin/products", admin(s.adminListProducts))
	handle("PATCH", "/api/admin/products/{id}", admin(s.adminPatchProduct))
	handle("POST", "/api/admin/products/{id}/pause", admin(s.adminPauseProduct))
	handle("POST", "/api/admin/products/{id}/resume", admin(s.adminResumeProduct))
	handle("POST", "/api/admin/products/{id}/end", admin(s.adminEndProduct))
	handle("GET", "/api/admin/audit", admin(s.adminAudit))
	handle("POST", "/api/admin/products/{id}/stock", admin(s.adminAdjustStock))
	handle("GET", "/api/admin/reconcile", admin(s.adminReconcile))
	handle("GET", "/api/admin/dlq", admin(s.adminDLQ))
	handle("POST", "/api/admin/dlq/replay", admin(s.adminReplay))
	handle("POST", "/api/admin/products/{id}/waiting-room", admin(s.adminWaitingRoom)) // room.go
	handle("GET", "/api/admin/products/{id}/waiting-room", admin(s.adminRoomStatus))
	handle("GET", "/api/admin/pulse", admin(s.adminPulse))
	handle("GET", "/api/admin/orders", admin(s.adminSearchOrders)) // admin_support.go
	handle("GET", "/api/admin/orders/{orderNo}", admin(s.adminGetOrder))
	handle("GET", "/api/admin/refunds", admin(s.adminRefunds))
	handle("POST", "/api/admin/payments/{paymentNo}/refund", admin(s.adminRefund))
}

// callCtx returns the context for one dependency call of a handler.
func (s *API) callCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
