package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

var testSecret = []byte("bench-test-secret")

// fakeGateway answers the few endpoints the scenarios use, with the
// semantics of docs/spec.md §3: real JWTs, stock, one orderNo per (user, requestId).
type fakeGateway struct {
	verifier *auth.Verifier
	mu       sync.Mutex
	nextID   int64
	nextNo   int64
	stock    map[int64]int64
	orders   map[int64]int64
	seen     map[string]string
	// limit429 > 0: every order request after that many answers 429 RATE_LIMITED.
	limit429 int64
	served   int64
}

func newFake() *fakeGateway {
	return &fakeGateway{verifier: auth.NewVerifier(testSecret), stock: map[int64]int64{}, orders: map[int64]int64{}, seen: map[string]string{}}
}

func (f *fakeGateway) handle(ctx *fasthttp.RequestCtx) {
	fail := func(status int, code string) {
		ctx.SetStatusCode(status)
		ctx.SetBodyString(`{"error":{"code":"` + code + `","message":"x"}}`)
	}
	switch string(ctx.Path()) {
	case "/readyz", "/healthz":
		ctx.SetBodyString(`{"status":"ready"}`)
		return
	}
	tok, _ := strings.CutPrefix(string(ctx.Request.Header.Peek("Authorization")), "Bearer ")
	claims, err := f.verifier.Verify(tok)
	if err != nil {
		fail(401, "UNAUTHENTICATED")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch string(ctx.Path()) {
	case "/api/admin/products":
		var p productSpec
		if !claims.Admin || json.Unmarshal(ctx.PostBody(), &p) != nil {
			fail(400, "INVALID_ARGUMENT")
			return
		}
		f.nextID++
		f.stock[f.nextID] = p.Stock
		ctx.SetStatusCode(201)
		fmt.Fprintf(ctx, `{"id":%d,"name":%q}`, f.nextID, p.Name)
	case "/api/orders":
		f.served++
		if f.limit429 > 0 && f.served > f.limit429 {
			fail(429, "RATE_LIMITED")
			return
		}
		var o struct {
			ProductID int64  `json:"productId"`
			Quantity  int64  `json:"quantity"`
			RequestID string `json:"requestId"`
		}
		if err := json.Unmarshal(ctx.PostBody(), &o); err != nil || !order.ValidRequestID(o.RequestID) || o.Quantity != 1 {
			fail(400, "INVALID_ARGUMENT")
			return
		}
		key := fmt.Sprintf("%d/%d/%s", claims.UserID, o.ProductID, o.RequestID)
		if no, ok := f.seen[key]; ok {
			ctx.SetStatusCode(200)
			fmt.Fprintf(ctx, `{"orderNo":"%s","requestId":"%s","status":"WAITING_PAY"}`, no, o.RequestID)
			return
		}
		if f.stock[o.ProductID] <= 0 {
			fail(409, "SOLD_OUT")
			return
		}
		f.stock[o.ProductID]--
		f.orders[o.ProductID]++
		f.nextNo++
		no := fmt.Sprintf("%022d", f.nextNo)
		f.seen[key] = no
		ctx.SetStatusCode(202)
		fmt.Fprintf(ctx, `{"orderNo":"%s","requestId":"%s","status":"PROCESSING"}`, no, o.RequestID)
	default:
		fail(404, "NOT_FOUND")
	}
}

// audit reports the fake's orders of pid as WAITING_PAY with every docs/spec.md §5
// check passing, unless breakCheck is set.
func (f *fakeGateway) audit(breakCheck bool) func(context.Context, int64) (pipeline.Report, error) {
	return func(_ context.Context, pid int64) (pipeline.Report, error) {
		f.mu.Lock()
		n := f.orders[pid]
		f.mu.Unlock()
		pa := pipeline.ProductAudit{ProductID: pid, Orders: map[order.Status][2]int64{order.WaitingPay: {n, n}},
			Checks: []pipeline.Check{{Name: "2 redis available = total - live orders (+ adjust)", OK: !breakCheck, Detail: "fake"}}}
		return pipeline.Report{OK: !breakCheck, Products: []pipeline.ProductAudit{pa},
			Checks: []pipeline.Check{{Name: "6 every outbox row SENT or DEAD", OK: true}}}, nil
	}
}

func startFake(t *testing.T, f *fakeGateway) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: f.handle}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	tg, err := newTarget(Target{Label: "stream", URL: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tg.closeIdle()
		srv.Shutdown()
		<-done
	})
	return tg
}

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func newTestRun(t *testing.T, f *fakeGateway, breakAudit bool) *run {
	t.Helper()
	p := QuickParams()
	p.Users, p.SpikeBuyers, p.SpikeStock, p.SpikeRate = 300, 300, 25, 1_000
	p.SustainedRates, p.SustainedWarmup, p.SustainedStep = []float64{200, 400}, 100*time.Millisecond, 200*time.Millisecond
	p.SoldOutStock, p.SoldOutRate, p.SoldOutWarmup, p.SoldOutDuration = 10, 500, 100*time.Millisecond, 200*time.Millisecond
	// These tests check what the scenarios do and report, not how fast this
	// machine is: every step's latency counts as clean (a test of the
	// verdict itself sets its own limit).
	p.SustainedP99 = time.Minute
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	u, err := issueUsers(testSecret, p.Users, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// The fake's pipeline keeps up: every order is settled at once.
	settled := func(context.Context, int64) (int64, error) { return math.MaxInt32, nil }
	return &run{env: Env{JWTSecret: testSecret, IdleWait: time.Second, audit: f.audit(breakAudit), settled: settled, Log: testLog{t}},
		p: p, id: "test" + newRunID(), users: u, log: testLog{t}}
}

func TestScenariosAgainstAFakeGateway(t *testing.T) {
	f := newFake()
	tg := startFake(t, f)
	r := newTestRun(t, f, false)
	ctx := context.Background()
	if err := tg.api.waitReady(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	rep := &Report{RunID: r.id, Started: time.Now(), Quick: true, Params: r.p, Targets: []Target{tg.Target},
		Scenarios: []string{Spike, Sustained, SoldOut}}

	spike := runSpike(ctx, r, tg)
	spike.Scenario, spike.Target = Spike, tg.Label
	spike.finish()
	if !spike.Pass || spike.Error != "" {
		t.Fatalf("spike: %s", spike.line())
	}
	if a, _ := spike.Figure("accepted"); a != 25 {
		t.Errorf("spike accepted %v, want the stock (25)", a)
	}
	if _, ok := spike.Figure("time to sell out"); !ok {
		t.Error("spike: no time to sell out")
	}
	if rush := spike.Phases[0].Result; rush.Count(classAccepted) != 25 || rush.Count(classSoldOut) != 275 {
		t.Errorf("spike classes %v", rush.ClassNames())
	}

	// The second step is cut short by 429s: "errors appear", the step fails
	// twice (its second try too) and the first one is the accepted intake.
	f.mu.Lock()
	f.limit429 = f.served + 80 + 40
	f.mu.Unlock()
	sus := runSustained(ctx, r, tg)
	sus.Scenario, sus.Target = Sustained, tg.Label
	sus.finish()
	if !sus.Pass || len(sus.Phases) != 3 || *sus.Phases[0].OK != true || *sus.Phases[1].OK != false || *sus.Phases[2].OK != false {
		t.Fatalf("sustained: %s, phases %d", sus.line(), len(sus.Phases))
	}
	if v, _ := sus.Figure("highest clean step"); v != 200 || sus.Headline.Value <= 0 {
		t.Errorf("sustained: highest clean step %v, headline %v", v, sus.Headline)
	}
	f.mu.Lock()
	f.limit429 = 0
	f.mu.Unlock()

	// A pipeline that falls behind makes the step unclean, however fast the
	// gateway answered.
	r.env.settled = func(context.Context, int64) (int64, error) { return math.MinInt32, nil } // far behind
	behind := runSustained(ctx, r, tg)
	if len(behind.Phases) != 2 || *behind.Phases[0].OK || *behind.Phases[1].OK || behind.Headline.Value != 0 {
		t.Errorf("sustained with a stalled pipeline: %d phases, headline %v", len(behind.Phases), behind.Headline)
	}
	r.env.settled = func(context.Context, int64) (int64, error) { return math.MaxInt32, nil }

	so := runSoldOut(ctx, r, tg)
	so.Scenario, so.Target = SoldOut, tg.Label
	so.finish()
	if !so.Pass || so.Headline.Value <= 0 || so.Headline.Unit != "rejections/s" {
		t.Fatalf("soldout: %s", so.line())
	}
	if storm := so.Phases[1].Result; storm.Count(classAccepted) != 0 || storm.Count(classSoldOut) != storm.Measured {
		t.Errorf("storm classes %v", storm.ClassNames())
	}

	rep.Results = []*ScenarioResult{spike, sus, so}
	rep.finish()
	if !rep.Pass {
		t.Fatal("report did not pass")
	}
	md := rep.Markdown()
	for _, want := range []string{"| spike | stream |", "| sustained | stream |", "| soldout | stream |", "PASS", "quick smoke run", "## Details", "409 SOLD_OUT"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Contains(rep.SummaryMarkdown(), "## Details") {
		t.Error("summary holds the details")
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"sustainedStep":"200ms"`) || !strings.Contains(string(js), `"p99_ms"`) {
		t.Errorf("JSON: %.300s", js)
	}
}

func TestFailedAuditFailsTheScenario(t *testing.T) {
	f := newFake()
	tg := startFake(t, f)
	r := newTestRun(t, f, true)
	r.p.SpikeBuyers, r.p.SpikeStock = 50, 5
	s := runSpike(context.Background(), r, tg)
	s.finish()
	if s.Pass || s.Audit == nil || s.Audit.Pass || len(s.Audit.Failed()) == 0 {
		t.Fatalf("a failed audit passed: %s", s.line())
	}
	rep := (&Report{Targets: []Target{tg.Target}, Results: []*ScenarioResult{s}}).finish()
	if rep.Pass || !strings.Contains(rep.Markdown(), "FAIL") {
		t.Fatal("report passed with a failed audit")
	}
}

func TestSecondTargetNeverReusesRequestIDs(t *testing.T) {
	r := &run{id: "abc"}
	a, b := &target{Target: Target{Label: "stream"}, index: 0}, &target{Target: Target{Label: "sync"}, index: 1}
	if r.requestPrefix(a, "sp") == r.requestPrefix(b, "sp") {
		t.Fatal("two targets share requestIds: order_info's unique (user_id, request_id) would turn the second's orders FAILED")
	}
	if p := r.requestPrefix(b, "sp") + "123456789"; !order.ValidRequestID(p) {
		t.Fatalf("%q is not a valid requestId", p)
	}
}

func TestDuplicateSchedule(t *testing.T) {
	s := duplicateSchedule(4, 7, 3)
	if len(s) != 28 {
		t.Fatalf("len %d", len(s))
	}
	count := map[int32]int{}
	for _, k := range s {
		count[k]++
	}
	for k := range int32(4) {
		if count[k] != 7 {
			t.Fatalf("key %d sent %d times", k, count[k])
		}
	}
	// Round one: every key three times in a row.
	want := []int32{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}
	for i, k := range want {
		if s[i] != k {
			t.Fatalf("schedule %v", s[:12])
		}
	}
	// The last round sends the remaining one per key.
	if got := s[24:]; got[0] != 0 || got[1] != 1 || got[2] != 2 || got[3] != 3 {
		t.Fatalf("last round %v", got)
	}
}

func TestDrainRate(t *testing.T) {
	t0 := time.Unix(0, 0)
	var samples []drainSample
	for i := range 11 { // 0, 1000, …, 10000 orders, one second apart
		samples = append(samples, drainSample{t0.Add(time.Duration(i) * time.Second), int64(i * 1000)})
	}
	if r := drainRate(samples, 10_000); r != 1000 {
		t.Fatalf("rate %v", r)
	}
	if drainRate(samples[:1], 10_000) != 0 || drainRate(nil, 0) != 0 {
		t.Fatal("not enough samples must give 0")
	}
}

func TestParseScenariosAndParams(t *testing.T) {
	if s, err := ParseScenarios(""); err != nil || len(s) != len(All) {
		t.Fatal(s, err)
	}
	if s, err := ParseScenarios("e2e, spike,spike"); err != nil || len(s) != 2 {
		t.Fatal(s, err)
	}
	if _, err := ParseScenarios("spike,nope"); err == nil {
		t.Fatal("unknown scenario accepted")
	}
	for _, p := range []Params{DefaultParams(), QuickParams()} {
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	p := DefaultParams()
	p.SustainedRates = []float64{1000, -1}
	if err := p.Validate(); err == nil || !strings.HasPrefix(err.Error(), "invalid config:") {
		t.Fatal(err)
	}
	p = DefaultParams()
	p.TicketConns = []int{128, 0}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "tickets connection count 0") {
		t.Fatal(err)
	}
}

func TestHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":                        "127.0.0.1:8080",
		"http://127.0.0.1:8080/":                       "127.0.0.1:8080",
		"http://localhost":                             "localhost:80",
		"http://[::1]:9":                               "[::1]:9",
		"http://127.0.0.1:8080,http://127.0.0.1:8082/": "127.0.0.1:8080,127.0.0.1:8082",
	} {
		if got, err := hostPort(in); err != nil || got != want {
			t.Errorf("%s: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"https://127.0.0.1:8080", "http://10.0.0.1:8080", "127.0.0.1:8080", "http://127.0.0.1:8080/api", "",
		"http://127.0.0.1:8080,http://10.0.0.1:8080", "http://127.0.0.1:8080,"} {
		if _, err := hostPort(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestProcAndCSVParsing(t *testing.T) {
	rss, hwm, err := parseStatus([]byte("Name:\tstampede\nVmPeak:\t 1 kB\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n"))
	if err != nil || rss != 102400 || hwm != 204800 {
		t.Fatal(rss, hwm, err)
	}
	if _, _, err := parseStatus([]byte("VmRSS: 1 kB\n")); err == nil {
		t.Fatal("missing VmHWM accepted")
	}
	if m := (&Memory{PeakRSSKB: 100_000, HWMKB: 292_969}).PeakMB(); m < 299 || m > 301 {
		t.Fatalf("PeakMB %v", m)
	}
	if rss, _, err := readStatus(1); err == nil && rss <= 0 {
		t.Fatal("own /proc status unreadable")
	}
	if c := cpuModel([]byte("processor\t: 0\nvendor_id\t: X\nmodel name\t: Intel(R) Xeon(R) Processor\n\nprocessor\t: 1\nmodel name\t: other\n")); c != "Intel(R) Xeon(R) Processor" {
		t.Fatalf("cpu %q", c)
	}
	if m := memTotalMB([]byte("MemTotal:       24684544 kB\nMemFree: 1 kB\n")); m != 24106 {
		t.Fatalf("mem %d", m)
	}
	var c Ceiling
	out := "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n" +
		"\"EVALSHA abc 5 k1,k2 1 60\",\"83333.34\",\"0.094\",\"0.016\",\"0.087\",\"0.151\",\"0.359\",\"0.551\"\n"
	if err := c.parseCSV([]byte(out)); err != nil || c.OpsPerSec != 83333.34 || c.P50 != 0.087 || c.P99 != 0.359 || c.Max != 0.551 {
		t.Fatalf("%+v %v", c, err)
	}
	if err := c.parseCSV([]byte("ERR unknown command\n")); err == nil {
		t.Fatal("garbage accepted")
	}
}

func TestFormatting(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 7: "7", 2.5: "2.5", 999.6: "1,000", 24812.3: "24,812", 1234567: "1,234,567", -1500: "-1,500"} {
		if got := fmtNum(in); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[float64]string{0: "0", 0.8312: "0.83 ms", 42.4: "42 ms", 1530: "1.53 s"} {
		if got := fmtMs(in); got != want {
			t.Errorf("fmtMs(%v) = %q, want %q", in, got, want)
		}
	}
}

// TestLevelsReportHasOneColumnPerLevel runs sustained against three fake
// gateways labelled none, aof and replicated (levels compared: every target
// steps through SustainedRates) and requires the report's per-level table to
// have one column per level and the commandstats figures per order.
func TestLevelsReportHasOneColumnPerLevel(t *testing.T) {
	f := newFake()
	r := newTestRun(t, f, false)
	r.levels = true
	r.p.SustainedRates, r.p.BaselineRates = []float64{100, 200}, []float64{50}
	r.p.SustainedWarmup, r.p.SustainedStep = 50*time.Millisecond, 100*time.Millisecond
	ctx := context.Background()
	levels := []string{"none", "aof", "replicated"}
	rep := &Report{RunID: r.id, Started: time.Now(), Quick: true, Params: r.p, Scenarios: []string{Sustained}, Levels: true}
	for i, level := range levels {
		tg := startFake(t, f)
		tg.Label, tg.Durability, tg.index = level, level, i
		rep.Targets = append(rep.Targets, tg.Target)
		s := runSustained(ctx, r, tg)
		s.Scenario, s.Target = Sustained, level
		// a commandstats delta as commandsPerOrder reads it: 3 commands per order, WAIT only for replicated
		accepted, _ := s.Figure("accepted")
		before := map[string]int64{"evalsha": 5, "info": 1}
		after := fmt.Sprintf("cmdstat_evalsha:calls=%d,usec=1\r\ncmdstat_xadd:calls=%d,usec=1\r\ncmdstat_info:calls=99,usec=1\r\n", 5+2*int64(accepted), int64(accepted))
		var waits int64
		if level == "replicated" {
			waits = int64(accepted) / 4
			after += fmt.Sprintf("cmdstat_wait:calls=%d,usec=1\r\n", waits)
		}
		addCommandStats(s, before, parseCommandStats(after))
		s.finish()
		if !s.Pass || len(s.Phases) != 2 {
			t.Fatalf("%s: %s, %d steps (want both SustainedRates, not BaselineRates)", level, s.line(), len(s.Phases))
		}
		if v, _ := s.Figure(figRedisCommands); math.Abs(v-3-float64(waits)/accepted) > 1e-9 {
			t.Errorf("%s: %v commands per order, want 3 + WAITs (info excluded)", level, v)
		}
		rep.Results = append(rep.Results, s)
	}
	rep.finish()
	md := rep.Markdown()
	if !strings.Contains(md, "| figure | none | aof | replicated |") {
		t.Fatalf("no per-level table header in:\n%s", md)
	}
	for _, row := range []string{"sustained step 100/s", "sustained step 200/s", "highest clean step", figRedisCommands, figRedisWait} {
		var line string
		for _, l := range strings.Split(md, "\n") {
			if strings.HasPrefix(l, "| sustained") && strings.Contains(l, row) {
				line = l
				break
			}
		}
		if line == "" {
			t.Errorf("no row %q in the per-level table", row)
			continue
		}
		if cells := strings.Count(line, "|") - 1; cells != 1+len(levels) {
			t.Errorf("row %q has %d cells, want %d: %s", row, cells, 1+len(levels), line)
		}
	}
	if !strings.Contains(md, "| sustained: "+figRedisWait+" | 0.000 | 0.000 | 0.2") {
		t.Errorf("WAIT per order not 0 / 0 / 0.25:\n%s", md)
	}
	for _, g := range rep.Goals {
		if g.Name == "stream vs sync intake" {
			t.Error("a level comparison claims the stream-vs-sync goal")
		}
	}
}
