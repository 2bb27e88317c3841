package gateway

import (
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/metric"
)

// Metrics are the gateway's Prometheus collectors. Build one per registry
// with NewMetrics and hand it to every Server of the process through
// Config.Metrics; a Server without one keeps private, unregistered
// collectors. Recording is allocation-free on the order path: counters are
// resolved once, and each route keeps its per-status histogram children.
//
// Series (all names carry the stampede_ prefix):
//
//	http_request_duration_seconds{method,route,status}  histogram of handler time; route is the
//	                                                     pattern ("/api/orders/{orderNo}"), "static" or "unmatched"
//	reserve_total{result}                                POST /api/orders outcomes that reached the
//	                                                     reserve step: accepted, duplicate, sold_out,
//	                                                     insufficient, limited, not_active, key_reused,
//	                                                     not_found, invalid, rate_limited, unavailable,
//	                                                     stock_corrupt, not_admitted (waiting room)
//	lua_call_duration_seconds{script}                    latency of one Redis script call (defined in package lua,
//	                                                     shared with the release calls of package pipeline)
//	stock_corrupt_total{product}                         requests that found the product's stock data in
//	                                                     Redis unusable (orders answered 500 STOCK_CORRUPT,
//	                                                     product reads showing it with 0 available); 0 from
//	                                                     the first order request for the product on
//	redis_unsafe_eviction_nodes                          Redis nodes whose maxmemory-policy is not
//	                                                     noeviction at the last watch (redischeck.go)
//	redis_no_persistence_nodes                           Redis nodes with appendonly no and save ""
//	redis_replica_wait_total{result}                     durability replicated: one request's wait for its
//	                                                     replicas: ok, timeout (503), error (503)
//	redis_replica_wait_duration_seconds                  histogram of that wait (shared WAIT of its batch)
type Metrics struct {
	requests       *prometheus.HistogramVec
	reserve        [numReserveResults]prometheus.Counter
	lua            prometheus.Observer // script="reserve"
	corrupt        *prometheus.CounterVec
	redisUnsafe    prometheus.Gauge
	redisNoPersist prometheus.Gauge
	waitResult     [3]prometheus.Counter // ok, timeout, error
	waitDuration   prometheus.Observer
}

// Reserve results, the values of stampede_reserve_total{result}.
const (
	ReserveAccepted     = "accepted"      // 202: stock taken, reservation on the intake stream
	ReserveDuplicate    = "duplicate"     // 200: replay of an accepted intent
	ReserveSoldOut      = "sold_out"      // 409 SOLD_OUT
	ReserveInsufficient = "insufficient"  // 409 INSUFFICIENT_STOCK
	ReserveLimited      = "limited"       // 409 PURCHASE_LIMIT_EXCEEDED
	ReserveNotActive    = "not_active"    // 409 SALE_NOT_ACTIVE
	ReserveKeyReused    = "key_reused"    // 422 IDEMPOTENCY_KEY_REUSED
	ReserveNotFound     = "not_found"     // 404 PRODUCT_NOT_FOUND (not loaded in Redis)
	ReserveInvalid      = "invalid"       // 400: quantity above the product's per-order maximum
	ReserveRateLimited  = "rate_limited"  // 429 RATE_LIMITED (token buckets)
	ReserveUnavailable  = "unavailable"   // 503: Redis failed or the breaker is open
	ReserveCorrupt      = "stock_corrupt" // 500 STOCK_CORRUPT: the product's stock data is unusable
	ReserveNotAdmitted  = "not_admitted"  // 409 NOT_ADMITTED: the waiting room is on and the buyer holds no admission
	ReservePaused       = "paused"        // 409 SALE_PAUSED: an admin paused the sale
)

type reserveResult int

const (
	resAccepted reserveResult = iota
	resDuplicate
	resSoldOut
	resInsufficient
	resLimited
	resNotActive
	resKeyReused
	resNotFound
	resInvalid
	resRateLimited
	resUnavailable
	resCorrupt
	resNotAdmitted
	resPaused
	numReserveResults
)

var reserveResultNames = [numReserveResults]string{
	ReserveAccepted, ReserveDuplicate, ReserveSoldOut, ReserveInsufficient, ReserveLimited, ReserveNotActive,
	ReserveKeyReused, ReserveNotFound, ReserveInvalid, ReserveRateLimited, ReserveUnavailable, ReserveCorrupt,
	ReserveNotAdmitted, ReservePaused,
}

// HTTPBuckets are the bucket bounds of stampede_http_request_duration_seconds:
// 250µs to 5s, dense where a 202 should land.
var HTTPBuckets = []float64{.00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// NewMetrics creates the gateway's collectors and registers them with reg
// (nil: unregistered). Calling it twice with one registry returns collectors
// that share the registered series, so several Servers can report into one
// registry.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.requests = metric.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "stampede_http_request_duration_seconds",
		Help:    "Time the gateway spent handling an HTTP request, by method, route pattern and status code.",
		Buckets: HTTPBuckets,
	}, []string{"method", "route", "status"}))
	reserve := metric.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stampede_reserve_total",
		Help: "Order requests (POST /api/orders) by the outcome of the reserve step: accepted, duplicate, sold_out, insufficient, limited, not_active, key_reused, not_found, invalid, rate_limited, unavailable, stock_corrupt, not_admitted.",
	}, []string{"result"}))
	for i, name := range reserveResultNames {
		m.reserve[i] = reserve.WithLabelValues(name)
	}
	m.lua = metric.Register(reg, lua.NewCallHistogram()).WithLabelValues("reserve")
	m.corrupt = metric.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stampede_stock_corrupt_total",
		Help: "Requests that found the product's stock data in Redis unusable (a non-integer field, a wrong key type, a script error on it): orders answered 500 STOCK_CORRUPT, product reads showing 0 available; by product.",
	}, []string{"product"}))
	m.redisUnsafe = metric.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stampede_redis_unsafe_eviction_nodes",
		Help: "Redis nodes whose maxmemory-policy was not noeviction at the gateway's last watch of the Redis settings (the gateway is not ready while above 0).",
	}))
	m.redisNoPersist = metric.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stampede_redis_no_persistence_nodes",
		Help: "Redis nodes with persistence off (appendonly no and save \"\") at the gateway's last watch: a restart loses stock and unwritten intake entries.",
	}))
	waits := metric.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stampede_redis_replica_wait_total",
		Help: "Durability replicated: order answers that waited for Redis replicas to acknowledge the reservation, by result: ok (answered), timeout (fewer replicas in time: 503), error (Redis failed: 503).",
	}, []string{"result"}))
	for i, name := range []string{"ok", "timeout", "error"} {
		m.waitResult[i] = waits.WithLabelValues(name)
	}
	m.waitDuration = metric.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "stampede_redis_replica_wait_duration_seconds",
		Help:    "Durability replicated: time one order answer waited for its Redis replicas (the shared SET + WAIT of its batch).",
		Buckets: HTTPBuckets,
	}))
	return m
}

// ReplicaWait counts one request's wait for its replicas.
func (m *Metrics) ReplicaWait(err error, d time.Duration) {
	switch {
	case err == nil:
		m.waitResult[0].Inc()
	case errors.Is(err, lua.ErrNotReplicated):
		m.waitResult[1].Inc()
	default:
		m.waitResult[2].Inc()
	}
	m.waitDuration.Observe(d.Seconds())
}

// ProductSeen starts stampede_stock_corrupt_total{product} at 0, so that
// the first STOCK_CORRUPT answer shows as an increase.
func (m *Metrics) ProductSeen(productID int64) { m.corrupt.WithLabelValues(productLabel(productID)) }

func (m *Metrics) StockCorrupt(productID int64) {
	m.corrupt.WithLabelValues(productLabel(productID)).Inc()
}

// ReserveOutcome counts one reserve call's result, from the error of
// lua.Reserve (nil = accepted) or of the breaker.
func (m *Metrics) ReserveOutcome(err error) {
	r := resUnavailable
	switch {
	case err == nil:
		r = resAccepted
	case errors.Is(err, lua.ErrDuplicate):
		r = resDuplicate
	case errors.Is(err, lua.ErrSoldOut):
		r = resSoldOut
	case errors.Is(err, lua.ErrInsufficient):
		r = resInsufficient
	case errors.Is(err, lua.ErrLimitExceeded):
		r = resLimited
	case errors.Is(err, lua.ErrNotActive):
		r = resNotActive
	case errors.Is(err, lua.ErrKeyReused):
		r = resKeyReused
	case errors.Is(err, lua.ErrNotFound):
		r = resNotFound
	case errors.Is(err, lua.ErrBadQuantity):
		r = resInvalid
	case errors.Is(err, lua.ErrStockCorrupt):
		r = resCorrupt
	case errors.Is(err, lua.ErrNotAdmitted):
		r = resNotAdmitted
	case errors.Is(err, lua.ErrPaused):
		r = resPaused
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		r = resUnavailable
	}
	m.reserve[r].Inc()
}

// ReserveRateLimited counts an order request refused by a rate limit before
// it reached Redis (429 RATE_LIMITED).
// LuaCall records one reserve.lua call of seconds
// (stampede_lua_call_duration_seconds{script="reserve"}).
func (m *Metrics) LuaCall(seconds float64) { m.lua.Observe(seconds) }

func (m *Metrics) ReserveRateLimited() { m.reserve[resRateLimited].Inc() }

// routeMetrics records the durations of one route. Children of the histogram
// vector are looked up once per status code and kept, so a request costs two
// clock reads and one atomic load.
type routeMetrics struct {
	vec           *prometheus.HistogramVec
	method, route string
	byStatus      [600]atomic.Pointer[prometheus.Observer]
}

func (m *Metrics) route(method, route string) *routeMetrics {
	if method == "" {
		method = "other"
	}
	return &routeMetrics{vec: m.requests, method: method, route: route}
}

func (r *routeMetrics) observe(status int, d time.Duration) {
	if status < 0 || status >= len(r.byStatus) {
		status = 0
	}
	p := r.byStatus[status].Load()
	if p == nil {
		o := r.vec.WithLabelValues(r.method, r.route, strconv.Itoa(status))
		p = &o
		r.byStatus[status].Store(p)
	}
	(*p).Observe(d.Seconds())
}

// instrument wraps h so that its duration is recorded under route.
func (r *routeMetrics) instrument(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		h(ctx)
		r.observe(ctx.Response.StatusCode(), time.Since(start))
	}
}

func productLabel(id int64) string { return strconv.FormatInt(id, 10) }
