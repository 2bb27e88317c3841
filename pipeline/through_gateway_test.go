package pipeline_test

// End-to-end tests through a real gateway (in process, on an in-memory
// listener) and the real pipeline: requestId scope across products, fault
// isolation of a corrupt product, a replay after the idempotency record
// expired.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

var gwJWT = []byte("pipeline-test-jwt")

const gwAdmin = 9000

type gw struct {
	t       *testing.T
	hc      *http.Client
	metrics *prometheus.Registry
}

// startGateway serves a gateway on e's Redis and MySQL until the test ends.
func startGateway(e *env, mods ...func(*gateway.Config)) *gw {
	t := e.t
	reg := prometheus.NewRegistry()
	cfg := gateway.Config{JWTSecret: gwJWT, PaymentSecret: []byte("pipeline-test-pay"), AdminUsers: []int64{gwAdmin},
		NodeID: 9, RedisTimeout: 10 * time.Second, RateUser: 0, Metrics: gateway.NewMetrics(reg)}
	for _, m := range mods {
		m(&cfg)
	}
	srv, err := gateway.New(cfg, e.rdb, e.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln := fasthttputil.NewInmemoryListener()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return ln.Dial() },
		MaxIdleConnsPerHost: 100}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway Serve: %v", err)
		}
	})
	return &gw{t: t, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}, metrics: reg}
}

type answer struct {
	status int
	body   map[string]any
	raw    string
}

func (g *gw) do(method, path string, user int64, body any) answer {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://gw"+path, rd)
	if user != 0 {
		tok, err := auth.Issue(gwJWT, user, user == gwAdmin, time.Hour)
		if err != nil {
			g.t.Error(err)
			return answer{}
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := g.hc.Do(req)
	if err != nil {
		g.t.Errorf("%s %s: %v", method, path, err)
		return answer{}
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func (a answer) str(k string) string { s, _ := a.body[k].(string); return s }

func (a answer) code() string {
	e, _ := a.body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// product creates an open product through the admin API and returns its id.
func (g *gw) product(stock int64, shards int) int64 {
	g.t.Helper()
	now := time.Now().UTC()
	a := g.do("POST", "/api/admin/products", gwAdmin, map[string]any{"name": fmt.Sprintf("p-%d", now.UnixNano()), "price": 500,
		"stock": stock, "saleStart": now.Add(-time.Hour).Format(time.RFC3339), "saleEnd": now.Add(time.Hour).Format(time.RFC3339),
		"perUserLimit": 0, "shards": shards})
	if a.status != 201 {
		g.t.Fatalf("create product: %d %s", a.status, a.raw)
	}
	return int64(a.body["id"].(float64))
}

func (g *gw) buy(user, pid int64, rid string) answer {
	return g.do("POST", "/api/orders", user, map[string]any{"productId": pid, "quantity": 1, "requestId": rid})
}

func (e *env) status(no string) order.Status {
	e.t.Helper()
	o, err := e.store.GetOrder(context.Background(), no)
	if err != nil {
		e.t.Fatalf("order %s: %v", no, err)
	}
	return o.Status
}

func (e *env) waitIdle(pids ...int64) pipeline.Report {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := pipeline.WaitIdle(ctx, e.rdb, e.store, pids, 20*time.Millisecond)
	if err != nil || !rep.OK {
		e.t.Fatalf("pipeline not idle / audit failed: %v %v", rep.Failed(), err)
	}
	return rep
}

// Item 1: one requestId sent at the same moment for two products (also a
// sharded one) is two intents: both answer 202 and both orders end
// WAITING_PAY — never a 202 followed by FAILED REQUEST_REUSED.
func TestSameRequestIDTwoProductsBothSucceed(t *testing.T) {
	e := newEnv(t)
	startPipeline(e, pipeline.ConsumerConfig{})
	g := startGateway(e)
	a, b := g.product(1000, 1), g.product(1000, 4)
	const trials = 40
	var nos []string
	var mu sync.Mutex
	for i := range trials {
		user, rid := int64(100+i), fmt.Sprintf("same-%d", i)
		var wg sync.WaitGroup
		got := make([]answer, 2)
		for j, pid := range []int64{a, b} {
			wg.Go(func() {
				if j == 1 && i%2 == 1 {
					time.Sleep(time.Duration(i%15) * time.Millisecond) // 0–15 ms apart, both orders
				}
				got[j] = g.buy(user, pid, rid)
			})
		}
		wg.Wait()
		for j, r := range got {
			if r.status != 202 || r.str("orderNo") == "" {
				t.Fatalf("trial %d product %d: %d %s, want 202", i, j, r.status, r.raw)
			}
			mu.Lock()
			nos = append(nos, r.str("orderNo"))
			mu.Unlock()
		}
		if got[0].str("orderNo") == got[1].str("orderNo") {
			t.Fatalf("trial %d: one orderNo for two products", i)
		}
		// A replay of each answers its own order.
		for j, pid := range []int64{a, b} {
			if r := g.buy(user, pid, rid); r.status != 200 || r.str("orderNo") != got[j].str("orderNo") {
				t.Fatalf("trial %d replay on product %d: %d %s", i, pid, r.status, r.raw)
			}
		}
	}
	e.waitIdle(a, b)
	for _, no := range nos {
		if st := e.status(no); st != order.WaitingPay {
			o, _ := e.store.GetOrder(context.Background(), no)
			t.Fatalf("order %s is %s (%s), want WAITING_PAY: a 202 that failed", no, st, o.CloseReason)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM order_info WHERE close_reason = 'REQUEST_REUSED'`); n != 0 {
		t.Fatalf("%d REQUEST_REUSED orders", n)
	}
}

// Item 2: a corrupt stock hash (and a corrupt user counter) fail only their
// product, with 500 STOCK_CORRUPT; healthy products keep answering 202 under
// steady traffic on the bad one, the breaker stays closed, /readyz stays
// ready, the metric names the product, and reconciliation reports the bad
// product while the healthy ones pass their audit.
func TestCorruptProductIsIsolated(t *testing.T) {
	e := newEnv(t)
	startPipeline(e, pipeline.ConsumerConfig{})
	g := startGateway(e, func(c *gateway.Config) { c.BreakerFailures = 3 })
	ok1, ok2, bad := g.product(5000, 1), g.product(5000, 1), g.product(100, 1)
	ctx := context.Background()
	if err := e.rdb.HSet(ctx, lua.ShardKeys(bad, 0).Stock(), "available", "abc").Err(); err != nil {
		t.Fatal(err)
	}
	// A script error on a key of the wrong type, for one user of ok2.
	if err := e.rdb.HSet(ctx, lua.ShardKeys(ok2, 0).User(77), "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if a := g.buy(77, ok2, "wrongtype"); a.status != 500 || a.code() != "STOCK_CORRUPT" {
		t.Fatalf("user with a wrong-type counter: %d %s", a.status, a.raw)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var badAnswers, badOther int
	var mu sync.Mutex
	for w := range 4 { // steady traffic on the bad product
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a := g.buy(int64(1000+w), bad, fmt.Sprintf("bad-%d-%d", w, i))
				mu.Lock()
				if a.status == 500 && a.code() == "STOCK_CORRUPT" {
					badAnswers++
				} else {
					badOther++
					t.Errorf("bad product answered %d %s", a.status, a.raw)
				}
				mu.Unlock()
			}
		})
	}
	deadline := time.Now().Add(3 * time.Second)
	healthy := 0
	for i := 0; time.Now().Before(deadline); i++ {
		for _, pid := range []int64{ok1, ok2} {
			if a := g.buy(int64(5000+i), pid, fmt.Sprintf("ok-%d", i)); a.status != 202 {
				t.Fatalf("healthy product %d during the bad product's traffic: %d %s", pid, a.status, a.raw)
			}
			healthy++
		}
		if i%20 == 0 {
			if a := g.do("GET", "/readyz", 0, nil); a.status != 200 {
				t.Fatalf("readyz while one product is corrupt: %d %s", a.status, a.raw)
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d healthy 202s, %d STOCK_CORRUPT answers for the bad product", healthy, badAnswers)
	if badAnswers < 10 || badOther != 0 {
		t.Fatalf("bad product: %d STOCK_CORRUPT, %d other answers", badAnswers, badOther)
	}
	if a := g.do("GET", "/api/products", 0, nil); a.status != 200 {
		t.Fatalf("product list with one corrupt product: %d %s", a.status, a.raw)
	}
	if n := gathered(t, g.metrics, "stampede_stock_corrupt_total", "product", fmt.Sprint(bad)); n < float64(badAnswers) {
		t.Fatalf("stampede_stock_corrupt_total{product=%d} = %v, want >= %d", bad, n, badAnswers)
	}

	e.waitIdle(ok1, ok2)
	rep, err := pipeline.Reconcile(ctx, e.rdb, e.store, nil)
	if err != nil {
		t.Fatalf("reconcile of every product stopped at the bad one: %v", err)
	}
	seen := map[int64]pipeline.ProductAudit{}
	for _, p := range rep.Products {
		seen[p.ProductID] = p
	}
	if p := seen[bad]; p.Error == "" || rep.OK {
		t.Fatalf("bad product not reported: %+v (ok %v)", p, rep.OK)
	}
	for _, id := range []int64{ok1, ok2} {
		p, found := seen[id]
		if !found || p.Error != "" {
			t.Fatalf("healthy product %d not audited: %+v", id, p)
		}
		for _, c := range p.Checks {
			if !c.OK {
				t.Fatalf("healthy product %d: %s (%s)", id, c.Name, c.Detail)
			}
		}
	}
	if !strings.Contains(strings.Join(rep.Failed(), "\n"), fmt.Sprintf("product %d: 0 product data readable", bad)) {
		t.Fatalf("failed checks %v do not name the bad product", rep.Failed())
	}
}

// gathered is the value of the counter or gauge name{label=value} in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}

// Item 7: once the idempotency record expired (2 s here, 24 h by default),
// the same requestId is a new intent: 202 with a new orderNo, stored as an
// ordinary order (never FAILED), the original PAID order untouched; later
// replays answer the new order. A record lost inside its lifetime (Redis
// data loss) is the one case where the writer still refuses the second
// order (FAILED REQUEST_REUSED, stock given back): one intent, one order.
func TestReplayAfterRecordExpiry(t *testing.T) {
	e := newEnv(t)
	const ttl = 2 * time.Second
	w := e.writer(pipeline.WriterConfig{BatchWait: 5 * time.Millisecond, RequestTTL: ttl})
	run(t, "writer", w.Run)
	run(t, "relay", e.relay(pipeline.RelayConfig{}).Run)
	run(t, "consumer", e.consumer(pipeline.ConsumerConfig{}).Run)
	g := startGateway(e, func(c *gateway.Config) { c.RequestTTL = ttl; c.PayTimeout = time.Second })
	pid := g.product(100, 1)

	first := g.buy(7, pid, "pay-once")
	if first.status != 202 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	n1 := first.str("orderNo")
	e.waitCount(20*time.Second, 1, `SELECT COUNT(*) FROM order_info WHERE order_no = ? AND status = 'WAITING_PAY'`, n1)
	if a := g.do("POST", "/api/orders/"+n1+"/pay", 7, nil); a.status != 200 || a.str("status") != "PAID" {
		t.Fatalf("pay: %d %s", a.status, a.raw)
	}
	if a := g.buy(7, pid, "pay-once"); a.status != 200 || a.str("orderNo") != n1 || a.str("status") != "PAID" {
		t.Fatalf("replay within the lifetime: %d %s, want 200 %s PAID", a.status, a.raw, n1)
	}
	k := lua.ShardKeys(pid, 0)
	pipelineWait(t, 10*time.Second, func() bool {
		n, _ := e.rdb.Exists(context.Background(), k.Request(7, "pay-once")).Result()
		return n == 0
	})
	again := g.buy(7, pid, "pay-once")
	if again.status != 202 || again.str("orderNo") == n1 {
		t.Fatalf("after the record expired: %d %s, want 202 with a new orderNo", again.status, again.raw)
	}
	n2 := again.str("orderNo")
	e.waitCount(20*time.Second, 1, `SELECT COUNT(*) FROM order_info WHERE order_no = ? AND status = 'WAITING_PAY'`, n2)
	if st := e.status(n1); st != order.Paid {
		t.Fatalf("original order %s now %s", n1, st)
	}
	var seq int
	if err := e.store.DB.QueryRow(`SELECT request_seq FROM order_info WHERE order_no = ?`, n2).Scan(&seq); err != nil || seq != 1 {
		t.Fatalf("renewed order request_seq %d %v, want 1", seq, err)
	}
	if a := g.buy(7, pid, "pay-once"); a.status != 200 || a.str("orderNo") != n2 {
		t.Fatalf("replay of the new intent: %d %s", a.status, a.raw)
	}

	// Inside the lifetime a lost record cannot make a second order.
	if err := e.rdb.Del(context.Background(), k.Request(7, "pay-once")).Err(); err != nil {
		t.Fatal(err)
	}
	lost := g.buy(7, pid, "pay-once")
	if lost.status != 202 {
		t.Fatalf("after losing the record: %d %s", lost.status, lost.raw)
	}
	n3 := lost.str("orderNo")
	e.waitCount(20*time.Second, 1, `SELECT COUNT(*) FROM order_info WHERE order_no = ? AND status = 'FAILED' AND close_reason = 'REQUEST_REUSED'`, n3)
	e.waitIdle(pid)
	if st := e.status(n2); st != order.WaitingPay {
		t.Fatalf("second intent's order %s now %s", n2, st)
	}
	var live int64
	_ = e.store.DB.QueryRow(`SELECT COUNT(*) FROM order_info WHERE user_id = 7 AND product_id = ? AND status IN ('WAITING_PAY','PAID')`, pid).Scan(&live)
	if live != 2 {
		t.Fatalf("%d live orders of the requestId, want 2 (one per lifetime)", live)
	}
}

func pipelineWait(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
