package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fasthttp/router"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/api"
	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/buyer"
	"github.com/stampede-sh/stampede/gateway/buyer/intake"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/gateway/operator"
	"github.com/stampede-sh/stampede/gateway/rediscall"
	"github.com/stampede-sh/stampede/gateway/room"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// Server is the gateway. Create it with New; it is safe for concurrent use.
type Server struct {
	cfg       Config
	rdb       redis.UniversalClient
	store     *persistence.Store
	log       *slog.Logger
	ans       *httpapi.Answers // error and JSON answers (errors.go's table)
	guard     httpapi.Guard    // bearer-token authentication
	signer    auth.Signer      // the demo login's tokens
	gen       *order.NoGenerator
	breaker   *rediscall.Breaker // every Redis call of a request (package rediscall)
	products  *httpapi.ProductCache
	operator  *operator.API // the operator's routes, /api/admin/… (package operator)
	router    *router.Router
	static    fasthttp.RequestHandler // nil without StaticDir
	handler   fasthttp.RequestHandler
	metrics   *Metrics
	buyer     *buyer.API                     // the buyer's routes (package buyer)
	intake    *intake.Intake                 // the buyer's order path, POST /api/orders (package intake)
	room      *room.Room                     // the waiting room: tickets, drops, admissions (package room)
	redisConf atomic.Pointer[redisConfState] // redischeck.go: the last watch of Redis's settings
	lease     atomic.Pointer[NodeLease]      // with NodeID -1: the leased orderNo node id (nodeid.go)
	// base is the parent of every context a handler passes to Redis or
	// MySQL. It is never the fasthttp RequestCtx, which is pooled and whose
	// Done channel would make context.WithTimeout start a goroutine.
	base context.Context

	// Browser-facing settings (clientconfig.go) and readyz's log limiter.
	pushPort   string // port of the push URL built for browsers
	pushOrigin string // origin of Config.PushURL, a CSP source; "" without
	notReady   notReadyLog
}

// New returns a gateway serving cfg with the given Redis client and MySQL
// store. It does no I/O: dependencies are checked by Ready. logger may be nil.
func New(cfg Config, rdb redis.UniversalClient, store *persistence.Store, logger *slog.Logger) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rdb == nil || store == nil {
		return nil, errors.New("invalid config: gateway needs a Redis client and a store")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "gateway")
	node := int64(cfg.NodeID)
	if node < 0 {
		node = 0 // replaced by the leased id before any order is taken (keepNode)
	}
	gen, err := order.NewNoGenerator(node)
	if err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	s := &Server{
		cfg:     cfg,
		rdb:     rdb,
		store:   store,
		log:     logger,
		gen:     gen,
		base:    context.Background(),
		metrics: cfg.Metrics,
	}
	s.ans = &httpapi.Answers{Log: logger, RetryAfter: httpapi.RetryAfterSeconds(cfg.BreakerOpen.Seconds())}
	s.guard = httpapi.Guard{Verifier: cfg.Verifier, Ans: s.ans}
	if s.guard.Verifier == nil {
		s.guard.Verifier = auth.NewVerifier(cfg.JWTSecret)
	}
	s.signer = auth.Signer{Secret: cfg.JWTSecret}
	if cfg.Signer != nil {
		s.signer = *cfg.Signer
	}
	s.pushPort, s.pushOrigin = pushSources(cfg)
	if s.metrics == nil {
		s.metrics = NewMetrics(nil)
	}
	s.breaker = rediscall.NewBreaker(cfg.BreakerFailures, cfg.BreakerOpen, cfg.RedisTimeout, logger)
	s.products = httpapi.NewProductCache(store, cfg.ProductCacheTTL, logger)
	s.wireBuyer()
	s.operator = operator.New(operator.Config{MaxBodyBytes: cfg.MaxBodyBytes, StoreTimeout: cfg.StoreTimeout,
		RoomWindow: cfg.RoomWindow, Ops: cfg.Ops}, operator.Deps{Store: store, Redis: rdb, Stock: s.intake.Stock(),
		Products: s.products, Answers: s.ans, Log: logger, RedisCall: s.redisCall, Available: s.buyer.Available,
		PendingOrder: s.buyer.PendingOrder, Room: s.room, ShardCount: s.intake.ShardCount})
	if err := s.wireStatic(); err != nil {
		return nil, err
	}
	s.router = s.routes()
	s.handler = s.recoverPanics(s.router.Handler)
	logger.Debug("gateway configured", "node", node, "demoLogin", !cfg.DisableDemoLogin,
		"demoCheckout", !cfg.DisableDemoCheckout, "static", cfg.StaticDir)
	return s, nil
}

// wireBuyer builds the buyer's API (package buyer), with its order intake
// (package intake) and the waiting room (package room), of a new Server.
func (s *Server) wireBuyer() {
	c := s.cfg
	s.buyer = buyer.New(buyer.Config{MaxBodyBytes: c.MaxBodyBytes, StoreTimeout: c.StoreTimeout, RequestTTL: c.RequestTTL,
		PaymentSecret: c.PaymentSecret, TokenTTL: c.TokenTTL, DisableDemoLogin: c.DisableDemoLogin,
		DisableDemoCheckout: c.DisableDemoCheckout, AdminUsers: c.AdminUsers, RateUserRead: c.RateUserRead,
		RateUserReadBurst: c.RateUserReadBurst,
		Intake: intake.Config{MaxBodyBytes: c.MaxBodyBytes, RequestTTL: c.RequestTTL, SyncIntake: c.SyncIntake,
			SoldOutTTL: c.SoldOutTTL, SoldOutBuyers: c.SoldOutBuyers, ReservePipeline: c.ReservePipeline,
			LookupPipeline: c.LookupPipeline, Replicated: c.Durability == DurabilityReplicated, ReplicaAcks: c.ReplicaAcks,
			ReplicaWait: c.ReplicaWait, RateGlobal: c.RateGlobal, RateGlobalBurst: c.RateGlobalBurst, RateUser: c.RateUser,
			RateUserBurst: c.RateUserBurst},
		Room: room.Config{MaxBodyBytes: c.MaxBodyBytes, PowSecret: c.PowSecret, PaymentSecret: c.PaymentSecret,
			PowExpiry: c.PowExpiry, RoomPipeline: c.RoomPipeline}},
		buyer.Deps{Store: s.store, Redis: s.rdb, Products: s.products, Answers: s.ans, Log: s.log, Signer: s.signer,
			Metrics: s.metrics, Gen: s.gen, NodeValid: s.nodeValid, RedisCall: s.redisCall})
	s.intake, s.room = s.buyer.Intake(), s.buyer.Room()
}

// wireStatic serves Config.StaticDir (the built client), with the security
// headers; nothing when it is "". Errors: the directory cannot be read.
func (s *Server) wireStatic() error {
	if s.cfg.StaticDir != "" {
		var err error
		if s.static, err = newStaticHandler(s.cfg.StaticDir, s.notFoundJSON); err != nil {
			return err
		}
		serve := s.static
		s.static = func(ctx *fasthttp.RequestCtx) {
			s.setSecurityHeaders(ctx)
			serve(ctx)
		}
	}
	return nil
}

func (s *Server) routes() *router.Router {
	r := router.New()
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = true
	// The client's files count as route "static", everything else that
	// matches no route as "unmatched".
	unmatched := s.metrics.route("", "unmatched")
	notFoundJSON := unmatched.instrument(s.notFoundJSON)
	var static fasthttp.RequestHandler
	if s.static != nil {
		static = s.metrics.route("GET", "static").instrument(s.static)
	}
	r.NotFound = func(ctx *fasthttp.RequestCtx) {
		if static != nil && (ctx.IsGet() || ctx.IsHead()) && !bytes.HasPrefix(ctx.Path(), apiPrefix) && !bytes.Equal(ctx.Path(), metricsPath) {
			static(ctx)
			return
		}
		notFoundJSON(ctx)
	}
	r.MethodNotAllowed = unmatched.instrument(func(ctx *fasthttp.RequestCtx) { s.ans.Fail(ctx, httpapi.ErrNoMethod) })

	// Every route records its duration under its pattern (Metrics).
	handle := func(method, path string, h fasthttp.RequestHandler) {
		r.Handle(method, path, s.metrics.route(method, path).instrument(h))
	}
	handle("GET", "/healthz", s.healthz)
	handle("GET", "/readyz", s.readyz)
	handle("GET", "/api/config", s.clientConfig)
	handle("GET", "/api/openapi.yaml", openAPIDocument)
	s.buyer.Mount(handle, &s.guard)    // package buyer: login, orders, payments, products, the room's routes
	s.operator.Mount(handle, &s.guard) // package operator: /api/admin/…
	return r
}

// Handler returns the gateway's request handler: routing, authentication,
// the API and, with StaticDir, the client. Use it to serve the gateway from
// another fasthttp.Server or to call it in tests.
func (s *Server) Handler() fasthttp.RequestHandler { return s.handler }

// Handle adds a route served next to the API (for example /metrics or the
// push WebSocket on the same port). Call it before the server starts
// serving; like fasthttp/router it panics on a path that conflicts with an
// existing route.
func (s *Server) Handle(method, path string, h fasthttp.RequestHandler) {
	s.router.Handle(method, path, s.metrics.route(method, path).instrument(h))
}

// Run listens on Config.Addr and serves until ctx is cancelled, then shuts
// down gracefully: it stops accepting, lets requests in flight finish (at
// most ShutdownTimeout) and returns nil.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("gateway: listen %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve is Run on a listener the caller opened; it closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := s.httpServer()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// The background work that requests depend on (the node lease, the
	// reserve batcher) must outlive the drain of requests in flight: it stops
	// when Serve returns, after the shutdown, not when ctx is cancelled.
	rctx, stopRepair := context.WithCancel(context.WithoutCancel(ctx))
	watchDone := s.watchRedisConfig(rctx) // redischeck.go
	defer func() { stopRepair(); <-watchDone }()
	if s.cfg.NodeID < 0 {
		leaseDone := make(chan struct{})
		go func() { defer close(leaseDone); s.keepNode(rctx, s.gen) }() // nodeid.go
		defer func() { stopRepair(); <-leaseDone }()
	}
	buyerDone := s.buyer.Start(rctx) // package buyer: the order intake's pipelines, replica waits, buyer-set reads; the room's ticket batcher
	defer func() { stopRepair(); <-buyerDone }()
	s.log.Info("gateway listening", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		if err == nil {
			err = errors.New("stopped unexpectedly")
		}
		return fmt.Errorf("gateway: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.ShutdownWithContext(sctx)
	// If Serve had not yet taken the listener, Shutdown did not close it.
	ln.Close()
	<-errc //nolint:errcheck // Serve's answer to the shutdown; err is the shutdown's
	if err != nil {
		return fmt.Errorf("gateway: shutdown: %w", err)
	}
	s.log.Info("gateway stopped")
	return nil
}

// httpServer is the fasthttp.Server that Serve runs.
func (s *Server) httpServer() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:      s.handler,
		ErrorHandler: s.requestError,
		Name:         "stampede",
		ReadTimeout:  s.cfg.ReadTimeout,
		WriteTimeout: s.cfg.WriteTimeout,
		IdleTimeout:  s.cfg.IdleTimeout,
		// Bodies up to this size are read and then refused by decodeBody
		// with a JSON 413 on an intact connection; larger ones are refused
		// while reading (requestError, 413 too).
		MaxRequestBodySize: max(16*s.cfg.MaxBodyBytes, 64<<10),
		CloseOnShutdown:    true,
		Logger:             fasthttpLogger{s.log},
	}
}

// requestError answers requests fasthttp could not read.
func (s *Server) requestError(ctx *fasthttp.RequestCtx, err error) {
	var netErr net.Error
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		httpapi.WriteError(ctx, fasthttp.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge,
			fmt.Sprintf("request body exceeds %d bytes", s.cfg.MaxBodyBytes))
	case errors.As(err, &small):
		httpapi.WriteError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, httpapi.CodeInvalidArgument, "request headers are too large")
	case errors.As(err, &netErr) && netErr.Timeout():
		httpapi.WriteError(ctx, fasthttp.StatusRequestTimeout, httpapi.CodeInvalidArgument, "request not received in time")
	default:
		httpapi.WriteError(ctx, fasthttp.StatusBadRequest, httpapi.CodeInvalidArgument, "malformed HTTP request")
	}
}

// recoverPanics turns a panic in next into 500 INTERNAL and logs it. No
// handler is meant to panic; this keeps one bug from killing the process.
func (s *Server) recoverPanics(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("panic in handler", "method", string(ctx.Method()), "path", string(ctx.Path()),
					"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				ctx.Response.Reset()
				httpapi.WriteError(ctx, fasthttp.StatusInternalServerError, httpapi.CodeInternal, "internal error")
			}
		}()
		next(ctx)
	}
}

// apiPrefix: requests under it never get the client's files (routes'
// NotFound serves the client for GET and HEAD outside /api/ when StaticDir
// is set, and a JSON 404 for everything else).
var apiPrefix = []byte("/api/")

// metricsPath never gets the client's index.html either: where /metrics is
// not served (production mode) it is a plain 404.
var metricsPath = []byte("/metrics")

func (s *Server) notFoundJSON(ctx *fasthttp.RequestCtx) { s.ans.Fail(ctx, httpapi.ErrNoRoute) }

// healthz answers 200 while the process serves HTTP.
func (s *Server) healthz(ctx *fasthttp.RequestCtx) {
	httpapi.WriteBody(ctx, fasthttp.StatusOK, []byte(`{"status":"ok"}`))
}

// openAPIDocument answers GET /api/openapi.yaml: the API's OpenAPI 3.1
// document (api/openapi.yaml, embedded), 200 application/yaml.
func openAPIDocument(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/yaml")
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.Response.SetBodyRaw(api.OpenAPI())
}

// fasthttpLogger sends fasthttp's own messages (mostly broken connections
// and unreadable requests) to slog at debug level. Those messages quote the
// request's bytes (its first and last 200 bytes), which may hold a bearer
// token, in whole or split so that no pattern recognises the pieces (issue
// 26): no byte of the request is logged. Each argument is replaced by what
// it is: an error by its kind, text by its size, an address as itself.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	if !f.l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	safe := make([]any, len(args))
	for i, a := range args {
		safe[i] = describeLogArg(a)
	}
	f.l.Debug("fasthttp: " + fmt.Sprintf(format, safe...))
}

// describeLogArg is a fasthttp log argument without request bytes.
func describeLogArg(a any) any {
	switch v := a.(type) {
	case net.Addr:
		return v.String()
	case error:
		return errorKind(v)
	case string:
		return fmt.Sprintf("[%d bytes]", len(v))
	case []byte:
		return fmt.Sprintf("[%d bytes]", len(v))
	case int, int64, uint64, int32, uint32, float64, bool, time.Duration:
		return v
	}
	return fmt.Sprintf("[%T]", a)
}

// errorKind names what went wrong with a request or connection and the size
// of fasthttp's message, never the message (it quotes the request).
func errorKind(err error) string {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	kind := fmt.Sprintf("%T", err)
	msg := err.Error()
	switch {
	case errors.As(err, &small):
		kind = "request headers too large"
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		kind = "request body too large"
	case errors.As(err, &ne) && ne.Timeout():
		kind = "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		kind = "connection closed"
	case strings.HasPrefix(msg, "error when reading request headers"):
		kind = "malformed request headers"
	case strings.HasPrefix(msg, "error when reading request body"):
		kind = "malformed request body"
	}
	return fmt.Sprintf("%s (message of %d bytes not logged: it quotes the request)", kind, len(msg))
}

// callCtx returns the context for one dependency call of a handler.
func (s *Server) callCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.base, d)
}

// redisCall runs fn under the Redis breaker with a RedisTimeout deadline
// (rediscall.Breaker.Call).
func (s *Server) redisCall(fn func(ctx context.Context) error) error { return s.breaker.Call(fn) }
