package pipeline_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

func TestMain(m *testing.M) {
	// Every store, client and connection is closed in t.Cleanup and every
	// component's Run has returned by then. Only the in-process gateway of
	// through_gateway_test.go leaves fasthttp's process-wide Date updater and a
	// stopped server's worker-pool cleaner (it notices the stop after its
	// idle sleep), as in package gateway.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

// env is one test's services: its own MySQL database, Redis DB and vhost.
// Tests of this package share them by name and so do not run in parallel.
type env struct {
	t       *testing.T
	store   *persistence.Store
	rdb     *redis.Client
	amqpURL string
	gen     *order.NoGenerator
	// qt is the type of the queues its Conns declare; maxAttempts their
	// TopologyConfig.MaxAttempts (0: the default).
	qt          pipeline.QueueType
	maxAttempts int
	// regs holds the registry of each component made by e.writer, e.relay
	// and e.consumer without Metrics of their own (e.metric reads it).
	regs map[any]*prometheus.Registry
}

// metrics returns new Metrics on a registry of their own, remembered for
// component c once it exists (see own).
func (e *env) metrics() (*pipeline.Metrics, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return pipeline.NewMetrics(reg), reg
}

// own remembers reg as component c's registry.
func (e *env) own(c any, reg *prometheus.Registry) {
	if e.regs == nil {
		e.regs = map[any]*prometheus.Registry{}
	}
	e.regs[c] = reg
}

// metric is the value of component c's series name (pipelinetest.Metric)
// as an integer: every series read this way counts whole events.
func (e *env) metric(c any, name string, labels ...string) int64 {
	e.t.Helper()
	reg, ok := e.regs[c]
	if !ok {
		e.t.Fatalf("no registry of its own for %T: make it with e.writer, e.relay or e.consumer, or e.own it", c)
	}
	return int64(pipelinetest.Metric(e.t, reg, name, labels...))
}

// newEnv is newEnvType with the production default, quorum queues.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvType(t, pipeline.DefaultQueueType)
}

// forEachQueueType runs test once per queue type, as subtests "classic" and
// "quorum", at the same time (each has databases and a vhost of its own).
func forEachQueueType(t *testing.T, test func(t *testing.T, qt pipeline.QueueType)) {
	for _, qt := range []pipeline.QueueType{pipeline.QueueClassic, pipeline.QueueQuorum} {
		t.Run(string(qt), func(t *testing.T) { t.Parallel(); test(t, qt) })
	}
}

// newEnvType returns a fresh environment whose Conns declare queues of type qt.
func newEnvType(t *testing.T, qt pipeline.QueueType) *env {
	t.Helper()
	gen, err := order.NewNoGenerator(7)
	if err != nil {
		t.Fatal(err)
	}
	return &env{
		t:       t,
		store:   persistencetest.New(t, "pipeline"),
		rdb:     luatest.New(t, luatest.DBPipeline),
		amqpURL: pipelinetest.Vhost(t, "pipeline"),
		gen:     gen,
		qt:      qt,
	}
}

// product creates a product with mysqlTotal units in MySQL and loads one
// Redis shard with redisAvailable units, registering its intake stream the
// way the gateway does.
func (e *env) product(mysqlTotal, redisAvailable int64) (persistence.Product, lua.Keys) {
	e.t.Helper()
	ctx := context.Background()
	now := time.Now()
	p, err := e.store.CreateProduct(ctx, persistence.Product{Name: fmt.Sprintf("phone-%d", now.UnixNano()), Price: 1999,
		Total: mysqlTotal, MaxPerOrder: 5, SaleStart: now.Add(-time.Hour), SaleEnd: now.Add(time.Hour)})
	if err != nil {
		e.t.Fatal(err)
	}
	k := lua.ShardKeys(p.ID, 0)
	if _, _, err := lua.Load(ctx, e.rdb, k, lua.ShardStock{Incarnation: p.Incarnation, Available: redisAvailable, Total: redisAvailable, Price: p.Price,
		MaxPerOrder: 5, SaleStart: p.SaleStart, SaleEnd: p.SaleEnd}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.rdb.SAdd(ctx, lua.StreamsKey, k.Intake()).Err(); err != nil {
		e.t.Fatal(err)
	}
	return p, k
}

// reserve makes n reservations of quantity q each (users firstUser…), as the
// gateway would, and returns their orderNos.
func (e *env) reserve(p persistence.Product, k lua.Keys, firstUser int64, n int, q int64) []string {
	e.t.Helper()
	nos := make([]string, 0, n)
	for i := range n {
		user := firstUser + int64(i)
		res, err := lua.Reserve(context.Background(), e.rdb, k, lua.ReserveArgs{OrderNo: e.gen.Next(p.ID, 0), UserID: user,
			RequestID: fmt.Sprintf("req-%d", user), Quantity: q, TTL: time.Hour})
		if err != nil {
			e.t.Fatalf("reserve %d: %v", i, err)
		}
		nos = append(nos, res.OrderNo)
	}
	return nos
}

func (e *env) conn() *pipeline.Conn {
	e.t.Helper()
	c, err := pipeline.NewConn(pipeline.ConnConfig{URL: e.amqpURL, MinBackoff: 20 * time.Millisecond, MaxBackoff: time.Second,
		Topology: e.topology()})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// topology is what e's Conns declare.
func (e *env) topology() pipeline.TopologyConfig {
	return pipeline.TopologyConfig{QueueType: e.qt, MaxAttempts: e.maxAttempts}
}

func (e *env) writer(cfg pipeline.WriterConfig) *pipeline.Writer {
	e.t.Helper()
	var reg *prometheus.Registry
	if cfg.Metrics == nil {
		cfg.Metrics, reg = e.metrics()
	}
	w, err := pipeline.NewWriter(e.store, e.rdb, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if reg != nil {
		e.own(w, reg)
	}
	return w
}

func (e *env) relay(cfg pipeline.RelayConfig) *pipeline.Relay {
	e.t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	var reg *prometheus.Registry
	if cfg.Metrics == nil {
		cfg.Metrics, reg = e.metrics()
	}
	r, err := pipeline.NewRelay(e.store, e.conn(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if reg != nil {
		e.own(r, reg)
	}
	return r
}

func (e *env) consumer(cfg pipeline.ConsumerConfig) *pipeline.Consumer {
	e.t.Helper()
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = 20 * time.Millisecond
	}
	var reg *prometheus.Registry
	if cfg.Metrics == nil {
		cfg.Metrics, reg = e.metrics()
	}
	c, err := pipeline.NewConsumer(e.store, e.rdb, e.conn(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if reg != nil {
		e.own(c, reg)
	}
	return c
}

// run starts a component's Run and returns a function that stops it and
// checks it returned nil; the stop also runs at cleanup.
func run(t *testing.T, name string, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: Run returned %v", name, err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("%s: Run did not return after cancel", name)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// count runs a COUNT(*)-like query.
func (e *env) count(query string, args ...any) int64 {
	e.t.Helper()
	var n sql.NullInt64
	if err := e.store.DB.QueryRow(query, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return n.Int64
}

// waitCount waits until query returns want.
func (e *env) waitCount(timeout time.Duration, want int64, query string, args ...any) {
	e.t.Helper()
	pipelinetest.WaitFor(e.t, timeout, query, func() (bool, string) {
		n := e.count(query, args...)
		return n == want, fmt.Sprintf("have %d, want %d", n, want)
	})
}

func (e *env) stock(pid int64) persistence.Stock {
	e.t.Helper()
	st, err := e.store.GetStock(context.Background(), pid)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *env) redisAvailable(k lua.Keys) int64 {
	e.t.Helper()
	n, err := e.rdb.HGet(context.Background(), k.Stock(), "available").Int64()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// writerStats, relayStats, consumerStats and sweeperStats read what a
// component counted from its Prometheus series (the components keep no
// other counters).
type writerStats struct{ Batches, Written, Duplicates, Reused, Dead, Claimed, Failures int64 }

func (e *env) writerStats(w *pipeline.Writer) writerStats {
	e.t.Helper()
	n := func(outcome string) int64 { return e.metric(w, "stampede_writer_entries_total", "outcome", outcome) }
	return writerStats{
		Batches: e.metric(w, "stampede_writer_batch_entries"),
		Written: n("written"), Duplicates: n("duplicate"), Reused: n("reused"), Dead: n("dead"),
		Claimed:  e.metric(w, "stampede_writer_claimed_entries_total"),
		Failures: e.metric(w, "stampede_writer_batch_failures_total"),
	}
}

type relayStats struct{ Claimed, Sent, Failed, Returned, Reconnect int64 }

func (e *env) relayStats(r *pipeline.Relay) relayStats {
	e.t.Helper()
	return relayStats{
		Claimed:   e.metric(r, "stampede_relay_claimed_rows_total"),
		Sent:      e.metric(r, "stampede_relay_rows_total", "result", "sent"),
		Failed:    e.metric(r, "stampede_relay_rows_total", "result", "retry"),
		Returned:  e.metric(r, "stampede_relay_publishes_total", "outcome", "returned"),
		Reconnect: e.metric(r, "stampede_relay_channel_reopens_total"),
	}
}

type consumerStats struct{ Acked, Requeued, Rejected int64 }

func (e *env) consumerStats(c *pipeline.Consumer) consumerStats {
	e.t.Helper()
	n := func(outcome string) int64 { return e.metric(c, "stampede_consumer_messages_total", "outcome", outcome) }
	return consumerStats{
		Acked:    n(pipeline.OutcomeOK) + n(pipeline.OutcomeDuplicate) + n(pipeline.OutcomeSkipped),
		Requeued: n(pipeline.OutcomeRetry),
		Rejected: n(pipeline.OutcomeDeadLetter),
	}
}

type sweeperStats struct{ Closed, Lost, Errors, Passes, Skipped int64 }

// sweeperStatsOf reads a sweeper's counts from reg, the registry of its
// Metrics.
func sweeperStatsOf(t testing.TB, reg prometheus.Gatherer) sweeperStats {
	t.Helper()
	n := func(name string, labels ...string) int64 { return int64(pipelinetest.Metric(t, reg, name, labels...)) }
	return sweeperStats{
		Closed: n("stampede_sweeper_closed_orders_total"),
		Lost:   n("stampede_sweeper_lost_closes_total"),
		Errors: n("stampede_sweeper_errors_total"),
		Passes: n("stampede_sweeper_passes_total", "pass", "close", "result", "done") +
			n("stampede_sweeper_passes_total", "pass", "close", "result", "error"),
		Skipped: n("stampede_sweeper_passes_total", "pass", "close", "result", "skipped"),
	}
}
