package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// Item 3: the eviction policy is watched, not only checked at start-up: a
// CONFIG SET to an evicting policy on a running Redis makes the gateway not
// ready (and the gauge 1) within the watch interval; back to noeviction,
// ready again. The gateway runs on a private Redis server: a policy change on
// the shared one would reach every package testing in parallel.
func TestRedisPolicyChangeAtRunTime(t *testing.T) {
	e := &env{t: t, rdb: luatest.Private(t), store: persistencetest.New(t, "gateway")}
	cfg := baseConfig()
	cfg.RedisCheckInterval = 100 * time.Millisecond
	srv, err := New(cfg, e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.hc, e.ln = serveInMemory(t, srv)
	ctx := context.Background()
	waitReady := func(want int) string {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r := e.do("GET", "/readyz", "", nil)
			if r.status == want {
				return string(r.body)
			}
			if time.Now().After(deadline) {
				t.Fatalf("readyz %s, want %d", r, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitReady(200)
	if g := testutil.ToFloat64(e.srv.metrics.redisUnsafe); g != 0 {
		t.Fatalf("unsafe nodes %v before the change", g)
	}
	if err := e.rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	// /readyz names the dependency only (issue 12: no internal detail on
	// the public port); the policy and the node go to the log and the gauge.
	body := waitReady(503)
	if !strings.Contains(body, "redis") {
		t.Fatalf("readyz does not name Redis: %s", body)
	}
	if g := testutil.ToFloat64(e.srv.metrics.redisUnsafe); g != 1 {
		t.Fatalf("stampede_redis_unsafe_eviction_nodes %v, want 1", g)
	}
	if err := e.rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	waitReady(200)
	if g := testutil.ToFloat64(e.srv.metrics.redisUnsafe); g != 0 {
		t.Fatalf("unsafe nodes %v after the restore", g)
	}
}

// Item 2 at the gateway: STOCK_CORRUPT is 500 for the bad product only and
// never counts against Redis in the breaker.
func TestStockCorruptDoesNotTripBreaker(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.BreakerFailures = 2 })
	good, bad := e.product(openSale(100)), e.product(openSale(100))
	sharded := e.product(func() productSpec { p := openSale(100); p.Shards = 3; return p }())
	ctx := context.Background()
	e.rdb.HSet(ctx, "stampede:{p:"+fmt.Sprint(bad)+":0}:stock", "available", "abc")
	for sh := range 3 { // every shard dry or corrupt: the pull path reads them all
		e.rdb.HSet(ctx, "stampede:{p:"+fmt.Sprint(sharded)+":"+fmt.Sprint(sh)+"}:stock", "available", "0")
	}
	e.rdb.HSet(ctx, "stampede:{p:"+fmt.Sprint(sharded)+":1}:stock", "available", "x1")
	for i := range 20 {
		msg := e.buy(int64(10+i), bad, 1, fmt.Sprint("b", i)).wantError(t, 500, CodeStockCorrupt)
		if !strings.Contains(msg, "corrupt") {
			t.Fatalf("message %q", msg)
		}
		if r := e.buy(int64(10+i), sharded, 1, fmt.Sprint("s", i)); r.status != 500 && r.status != 202 {
			t.Fatalf("sharded product with a corrupt shard: %s", r)
		}
		if r := e.buy(int64(10+i), good, 1, fmt.Sprint("g", i)); r.status != 202 {
			t.Fatalf("healthy product: %s", r)
		}
	}
	if st := e.srv.breaker.State().String(); st != "closed" {
		t.Fatalf("breaker %s after STOCK_CORRUPT answers", st)
	}
	if r := e.do("GET", "/readyz", "", nil); r.status != 200 {
		t.Fatalf("readyz %s", r)
	}
	if r := e.do("GET", "/api/products", "", nil); r.status != 200 {
		t.Fatalf("product list: %s", r)
	}
	if n := testutil.ToFloat64(e.srv.metrics.corrupt.WithLabelValues(fmt.Sprint(bad))); n < 20 {
		t.Fatalf("stampede_stock_corrupt_total{product=%d} = %v", bad, n)
	}
}

// Item 1 on a sharded product: a user's home shard is a pure function of
// the user id and the product's fixed shard count, so every replay of
// (user, product, requestId) meets the same idempotency record — also on
// another gateway instance with cold caches — and the same requestId on
// two sharded products is two orders.
func TestShardedReplayHitsSameShard(t *testing.T) {
	e := newEnv(t)
	spec := openSale(500)
	spec.Shards = 4
	a, b := e.product(spec), e.product(spec)
	other, err := New(baseConfig(), e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hc2, _ := serveInMemory(t, other)
	for u := int64(1); u <= 40; u++ {
		rid := fmt.Sprint("rid-", u)
		na, nb := e.accepted(u, a, 1, rid), e.accepted(u, b, 1, rid)
		if na == nb {
			t.Fatalf("user %d: one orderNo for two products", u)
		}
		for _, c := range []struct {
			pid int64
			no  string
		}{{a, na}, {b, nb}} {
			r := doHTTP(t, hc2, "POST", "/api/orders", token(t, u), orderReq{c.pid, 1, rid})
			if r.status != 200 || r.json(t)["orderNo"] != c.no {
				t.Fatalf("user %d replay on another gateway: %s, want 200 %s", u, r, c.no)
			}
		}
		if h1, h2 := lua.HomeShard(u, 4), lua.HomeShard(u, 4); h1 != h2 || !strings.HasPrefix(na[19:21], fmt.Sprintf("%02d", h1)) {
			t.Fatalf("user %d: home shard %d/%d, orderNo %s", u, h1, h2, na)
		}
	}
}

// Item 8: a replay storm costs MySQL nothing. Proof: the storm goes to a
// second gateway whose MySQL store is closed — any query would fail and
// answer 503 — and every replay must still answer 200 with its orderNo and
// last known status. MariaDB's Com_select delta over the storm is logged as
// the measurement (it counts every SELECT of the server, also those of
// other test packages running at the same time; run alone it is 0). The
// old design made one SELECT per replay, and with MySQL closed answered 503.
func TestReplayStormReadsNoMySQL(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(1000))
	const buyers, rounds = 100, 20
	nos := make([]string, buyers)
	for i := range buyers {
		nos[i] = e.accepted(int64(1+i), pid, 1, fmt.Sprint("storm-", i))
	}
	e.record(nos[0])
	e.lock(nos[0]) // one of them WAITING_PAY, reported to Redis as the consumer does
	down, err := persistence.Open(context.Background(), persistencetest.DSNFor(t, "gateway"))
	if err != nil {
		t.Fatal(err)
	}
	down.Close() // every query now fails
	srv, err := New(baseConfig(), e.rdb, down, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := serveInMemory(t, srv)
	before := e.mysqlSelects()
	var wg sync.WaitGroup
	var bad atomic.Int64
	start := time.Now()
	for i := range buyers {
		wg.Go(func() {
			tok := token(t, int64(1+i))
			for range rounds {
				r := doHTTP(t, hc, "POST", "/api/orders", tok, orderReq{pid, 1, fmt.Sprint("storm-", i)})
				want := "PROCESSING"
				if i == 0 {
					want = "WAITING_PAY"
				}
				if r.status != 200 || r.json(t)["orderNo"] != nos[i] || r.json(t)["status"] != want {
					if bad.Add(1) < 5 {
						t.Errorf("replay: %s", r)
					}
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	delta := e.mysqlSelects() - before // SHOW GLOBAL STATUS counts as Com_show_status, not Com_select
	replays := int64(buyers * rounds)
	t.Logf("%d replays in %v (%.0f/s) with MySQL closed for the gateway: all answered from Redis; server-wide Com_select delta %d (other packages' tests included)",
		replays, took, float64(replays)/took.Seconds(), delta)
	if bad.Load() > 0 {
		t.Fatalf("%d of %d replays not answered without MySQL", bad.Load(), replays)
	}
}

// mysqlSelects is the MySQL server's SELECT count (Com_select, every
// session's — other packages' tests included; SHOW GLOBAL STATUS is not
// one).
func (e *env) mysqlSelects() int64 {
	e.t.Helper()
	var name string
	var n int64
	if err := e.store.DB.QueryRow(`SHOW GLOBAL STATUS LIKE 'Com_select'`).Scan(&name, &n); err != nil {
		e.t.Fatal(err)
	}
	return n
}
