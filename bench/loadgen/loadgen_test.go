package loadgen

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// A HostClient's idle-connection cleaner sleeps up to
		// MaxIdleConnDuration (1 s) before it sees its connections closed.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		// The test server's worker-pool cleaner ends up to 10 s after Shutdown;
		// its Date header updater lives for the whole process.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}

// serve starts a fasthttp server on a loopback port and returns its address.
func serve(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Shutdown()
		<-done
	})
	return ln.Addr().String()
}

// indexed builds GET /?i=<index>.
func indexed(i int64, req *fasthttp.Request) {
	req.SetRequestURI("/?i=" + strconv.FormatInt(i, 10))
}

func reqIndex(ctx *fasthttp.RequestCtx) int64 {
	n, _ := strconv.ParseInt(string(ctx.QueryArgs().Peek("i")), 10, 64)
	return n
}

func TestScheduleWarmupAndClasses(t *testing.T) {
	t.Parallel()
	addr := serve(t, func(ctx *fasthttp.RequestCtx) {
		if reqIndex(ctx)%2 == 0 {
			ctx.SetStatusCode(202)
			ctx.SetBodyString(`{"orderNo":"123","status":"PROCESSING"}`)
			return
		}
		ctx.SetStatusCode(409)
		ctx.SetBodyString(`{"error":{"code":"SOLD_OUT","message":"sold out"}}`)
	})
	var observed, warm atomic.Int64
	var mu sync.Mutex
	seen := map[int64]bool{}
	res, err := Run(context.Background(), Config{
		Addr: addr, Rate: 200, Warmup: 250 * time.Millisecond, Duration: 500 * time.Millisecond,
		Build: indexed,
		Observe: func(o Outcome, resp *fasthttp.Response) {
			observed.Add(1)
			if o.Warmup {
				warm.Add(1)
			}
			if o.Class == "202" && StringField(resp.Body(), "orderNo") != "123" {
				t.Errorf("request %d: orderNo not seen in %q", o.Index, resp.Body())
			}
			mu.Lock()
			seen[o.Index] = true
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// 200/s over 750 ms = 150 requests; those scheduled in the first 250 ms
	// (i < 50) are warm-up.
	if res.Scheduled != 150 || res.Sent != 150 || res.Abandoned != 0 {
		t.Fatalf("scheduled %d sent %d abandoned %d, want 150 150 0", res.Scheduled, res.Sent, res.Abandoned)
	}
	if res.WarmupRequests != 50 || warm.Load() != 50 || res.Measured != 100 || observed.Load() != 150 || len(seen) != 150 {
		t.Fatalf("warm-up %d (observed %d), measured %d, observed %d distinct %d; want 50 50 100 150 150",
			res.WarmupRequests, warm.Load(), res.Measured, observed.Load(), len(seen))
	}
	if res.Count("202") != 50 || res.Count("409 SOLD_OUT") != 50 || res.Errors != 0 {
		t.Fatalf("classes %v errors %d", res.ClassNames(), res.Errors)
	}
	if res.Latency.Count != 100 || res.Classes["202"].Latency.Count != 50 || res.Histogram("").TotalCount() != 100 {
		t.Fatalf("histogram counts: all %d, 202 %d", res.Latency.Count, res.Classes["202"].Latency.Count)
	}
	if res.Throughput <= 0 || res.Window <= 0 || res.Classes["202"].Rate <= 0 {
		t.Fatalf("throughput %v window %v", res.Throughput, res.Window)
	}
	// The window starts at the end of the warm-up and ends at the last answer,
	// which cannot come before the last scheduled time (745 ms after t0).
	if res.Window < 490*time.Millisecond {
		t.Fatalf("window %v shorter than the measured schedule", res.Window)
	}
	if !(res.Latency.P50 <= res.Latency.P99 && res.Latency.P99 <= res.Latency.Max) {
		t.Fatalf("percentiles out of order: %+v", res.Latency)
	}
}

// A server that takes 50 ms per request for one second, with two workers,
// serves 40 requests/s while 200/s arrive: the backlog grows to ~160 requests.
// Measured from the scheduled time the stall costs hundreds of milliseconds;
// measured from the send (closed loop, coordinated omission) it looks like 50 ms.
func TestStallShowsInLatencyFromScheduledTime(t *testing.T) {
	t.Parallel()
	var first atomic.Int64
	addr := serve(t, func(ctx *fasthttp.RequestCtx) {
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		since := time.Duration(now - first.Load())
		if since >= 300*time.Millisecond && since < 1300*time.Millisecond {
			time.Sleep(50 * time.Millisecond)
		}
		ctx.SetStatusCode(202)
	})
	res, err := Run(context.Background(), Config{
		Addr: addr, Rate: 200, Duration: 2 * time.Second, Workers: 2, Build: indexed,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Abandoned != 0 || res.Errors != 0 || res.Measured != 400 {
		t.Fatalf("abandoned %d errors %d measured %d, want 0 0 400", res.Abandoned, res.Errors, res.Measured)
	}
	t.Logf("from scheduled time: %+v", res.Latency)
	t.Logf("from send:           %+v", res.Service)
	t.Logf("start lag: %+v, late %d", res.StartLag, res.Late)
	if res.Latency.Max < 400 || res.Latency.P99 < 300 {
		t.Fatalf("the stall is hidden: latency from scheduled time %+v", res.Latency)
	}
	if res.Latency.P99 < 2*res.Service.P99 {
		t.Fatalf("latency from scheduled time (p99 %.1f ms) should dwarf service time (p99 %.1f ms)", res.Latency.P99, res.Service.P99)
	}
	if res.Late < 50 || res.StartLag.Max < 300 {
		t.Fatalf("requests that could not start on time: late %d, start lag %+v", res.Late, res.StartLag)
	}
}

func TestTimeoutsAndAbandonedRequestsAreCounted(t *testing.T) {
	t.Parallel()
	addr := serve(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(400 * time.Millisecond)
		ctx.SetStatusCode(202)
	})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{
		Addr: addr, Rate: 100, Requests: 50, Workers: 2,
		Timeout: 100 * time.Millisecond, Grace: 100 * time.Millisecond, Build: indexed,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent+res.Abandoned != res.Scheduled || res.Scheduled != 50 {
		t.Fatalf("sent %d + abandoned %d != scheduled %d", res.Sent, res.Abandoned, res.Scheduled)
	}
	if res.Abandoned == 0 || res.Count(ClassError) == 0 || res.Errors != res.Count(ClassError) || len(res.ErrorSamples) == 0 {
		t.Fatalf("abandoned %d, error class %d, errors %d, samples %v", res.Abandoned, res.Count(ClassError), res.Errors, res.ErrorSamples)
	}
	if res.Throughput != 0 {
		t.Fatalf("throughput %v counts errors", res.Throughput)
	}
	// Bounded in time: schedule (0.49 s) + grace + one timeout, with slack.
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("run took %v", took)
	}
}

func TestCancelAbandonsTheRest(t *testing.T) {
	t.Parallel()
	addr := serve(t, func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(200) })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, Config{Addr: addr, Rate: 100, Duration: time.Minute, Build: indexed})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if res.Sent == 0 || res.Sent+res.Abandoned != res.Scheduled || res.Abandoned < res.Scheduled/2 {
		t.Fatalf("sent %d abandoned %d scheduled %d", res.Sent, res.Abandoned, res.Scheduled)
	}
}

func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"127.0.0.1:8080", "127.3.4.5:1", "[::1]:8080", "localhost:8080"} {
		if err := CheckLoopback(a); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	if err := CheckLoopback("127.0.0.1:1,[::1]:2"); err != nil {
		t.Errorf("list of loopback servers: %v", err)
	}
	for _, a := range []string{"10.0.0.1:80", "8.8.8.8:53", "[2001:db8::1]:80", "127.0.0.1", "", "127.0.0.1:1,10.0.0.1:80", "127.0.0.1:1,"} {
		if err := CheckLoopback(a); err == nil {
			t.Errorf("%s accepted", a)
		}
	}
	_, err := Run(context.Background(), Config{Addr: "192.0.2.1:80", Rate: 1, Requests: 1, Build: indexed})
	if err == nil {
		t.Fatal("Run loaded a non-loopback address")
	}
}

// A comma-separated Addr spreads the requests over every server.
func TestSeveralServersShareTheLoad(t *testing.T) {
	t.Parallel()
	// Each answer takes 5 ms, so about 10 requests are in flight at 2,000/s
	// and the client holds that many connections, dialed round-robin; with
	// instant answers one or two connections carried everything and one
	// server could get almost nothing on a loaded machine (9 of 400 once).
	var hits [2]atomic.Int64
	a := serve(t, func(ctx *fasthttp.RequestCtx) {
		hits[0].Add(1)
		time.Sleep(5 * time.Millisecond)
		ctx.SetStatusCode(202)
	})
	b := serve(t, func(ctx *fasthttp.RequestCtx) {
		hits[1].Add(1)
		time.Sleep(5 * time.Millisecond)
		ctx.SetStatusCode(202)
	})
	res, err := Run(context.Background(), Config{Addr: a + "," + b, Rate: 2000, Requests: 400, Workers: 32, Build: indexed})
	if err != nil {
		t.Fatal(err)
	}
	if res.Count("202") != 400 {
		t.Fatalf("202s: %d of 400", res.Count("202"))
	}
	for i := range hits {
		if n := hits[i].Load(); n < 40 {
			t.Errorf("server %d answered %d of 400 requests", i, n)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]Config{
		"no rate":     {Addr: "127.0.0.1:1", Duration: time.Second, Build: indexed},
		"no length":   {Addr: "127.0.0.1:1", Rate: 1, Build: indexed},
		"no build":    {Addr: "127.0.0.1:1", Rate: 1, Duration: time.Second},
		"negative":    {Addr: "127.0.0.1:1", Rate: 1, Duration: -time.Second, Build: indexed},
		"no workers?": {Addr: "127.0.0.1:1", Rate: 1, Duration: time.Second, Build: indexed, Workers: -1},
	} {
		c.setDefaults()
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := Config{Rate: 30000}
	c.setDefaults()
	if c.Workers != 1024 {
		t.Errorf("workers %d", c.Workers)
	}
	c = Config{Rate: 10, Warmup: time.Second, Duration: 2 * time.Second}
	if n := c.total(); n != 30 {
		t.Errorf("total %d", n)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	h := NewHistogram()
	for ms := 1; ms <= 1000; ms++ {
		Record(h, time.Duration(ms)*time.Millisecond)
	}
	s := Summarize(h)
	near := func(got, want float64) bool { return got >= want*0.998 && got <= want*1.002 }
	if s.Count != 1000 || !near(s.Min, 1) || !near(s.P50, 500) || !near(s.P95, 950) || !near(s.P99, 990) ||
		!near(s.P999, 999) || !near(s.Max, 1000) || !near(s.Mean, 500.5) {
		t.Fatalf("summary %+v", s)
	}
	Record(h, -time.Second) // clamped to 1 µs
	Record(h, 24*time.Hour) // clamped to the maximum
	Record(h, 0)            // clamped to 1 µs
	if h.TotalCount() != 1003 || Summarize(h).Min != 0.001 || Summarize(h).Max < 299_000 {
		t.Fatalf("clamping: %+v", Summarize(h))
	}
	if (Summarize(nil) != Summary{}) || (Summarize(NewHistogram()) != Summary{}) {
		t.Fatal("empty summary not zero")
	}
}

func TestFieldsAndDefaultClassify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"error": {"code" : "SOLD_OUT", "message":"sold out"}}`)
	if c := ErrorCode(body); c != "SOLD_OUT" {
		t.Errorf("ErrorCode = %q", c)
	}
	if c := ErrorCode([]byte(`{"code":"X"}`)); c != "" {
		t.Errorf("ErrorCode without error object = %q", c)
	}
	b := []byte(`{"requestId":"r-1","orderNo":"0001","status":"PROCESSING","orderNoX":"no"}`)
	if StringField(b, "orderNo") != "0001" || StringField(b, "status") != "PROCESSING" || StringField(b, "missing") != "" {
		t.Errorf("StringField")
	}
	if StringField([]byte(`{"orderNo":12}`), "orderNo") != "" || StringField([]byte(`{"orderNo":"unterminated`), "orderNo") != "" {
		t.Errorf("StringField on non-strings")
	}
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.SetStatusCode(409)
	resp.SetBody(body)
	if c := DefaultClassify(0, resp, nil); c != "409 SOLD_OUT" {
		t.Errorf("class %q", c)
	}
	resp.SetStatusCode(202)
	if c := DefaultClassify(0, resp, nil); c != "202" {
		t.Errorf("class %q", c)
	}
	if c := DefaultClassify(0, resp, fasthttp.ErrTimeout); c != ClassError {
		t.Errorf("class %q", c)
	}
}

// Under overload the window also serves warm-up requests that queued: the
// throughput counts answers by arrival in the window, the latency statistics
// only the requests scheduled in it.
func TestRecorderCountsAnswersByArrival(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	warmupEnd := t0.Add(time.Second)
	rec := &recorder{lateAfter: time.Millisecond, warmupEnd: warmupEnd, classes: map[string]*ClassStats{},
		all: NewHistogram(), service: NewHistogram(), lag: NewHistogram()}
	add := func(sched, done time.Duration, class string, status int) {
		s := t0.Add(sched)
		rec.add(Outcome{Class: class, Status: status, Warmup: s.Before(warmupEnd), Scheduled: s, Started: s, Done: t0.Add(done)})
	}
	add(100*time.Millisecond, 200*time.Millisecond, "202", 202) // warm-up, answered in the warm-up: ignored
	for range 4 {
		add(500*time.Millisecond, 1500*time.Millisecond, "202", 202) // warm-up, answered in the window
	}
	for range 5 {
		add(1200*time.Millisecond, 3*time.Second, "409 SOLD_OUT", 409) // measured
	}
	add(1300*time.Millisecond, 3*time.Second, "503 UNAVAILABLE", 503) // measured error
	if rec.warmup != 5 || rec.measured != 6 || rec.errors != 1 || rec.inWindow != 9 || !rec.lastDone.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("warm-up %d measured %d errors %d in window %d last %v", rec.warmup, rec.measured, rec.errors, rec.inWindow, rec.lastDone)
	}
	if c := rec.classes["202"]; c.Count != 0 || c.done != 4 {
		t.Fatalf("202: count %d done %d", c.Count, c.done)
	}
	if c := rec.classes["409 SOLD_OUT"]; c.Count != 5 || c.done != 5 || c.hist.TotalCount() != 5 {
		t.Fatalf("409: count %d done %d", c.Count, c.done)
	}
	if rec.all.TotalCount() != 6 || rec.late != 0 { // each started on time
		t.Fatalf("latencies %d late %d", rec.all.TotalCount(), rec.late)
	}
}
