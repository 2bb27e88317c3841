package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"
)

// Config is one constant-arrival-rate run. Request i (0-based) is scheduled
// at t0 + i/Rate, whatever happened to the requests before it.
type Config struct {
	// Addr is the server's host:port, or several comma-separated (requests
	// then spread over them: fasthttp.HostClient dials them round-robin).
	// Every one must be a loopback address: the generator refuses to load
	// anything but this machine.
	Addr string
	// Rate is the arrival rate in requests per second. Required, > 0.
	Rate float64
	// Warmup is the leading part of the schedule: its requests are sent but
	// left out of every statistic except WarmupRequests. Default 0.
	Warmup time.Duration
	// Duration is the measured part of the schedule, after Warmup.
	Duration time.Duration
	// Requests, if > 0, is the number of requests to schedule; the schedule
	// then spans Requests/Rate whatever Duration says. Default
	// Rate × (Warmup + Duration). One of Requests and Duration is required.
	Requests int64
	// Workers bounds the requests in flight (and the connections). A request
	// whose turn comes while every worker is busy starts late; its latency
	// still counts from its scheduled time. Default Rate/20 (50 ms of
	// arrivals), at least 8, at most 1024.
	Workers int
	// Timeout bounds one request. Default 5s.
	Timeout time.Duration
	// Grace is how long after the last scheduled time requests may still be
	// started; later ones are abandoned (counted, never sent), so a run ends
	// by itself at most Grace + Timeout after its schedule. Default 2s.
	Grace time.Duration
	// LateAfter: a measured request that starts more than this after its
	// scheduled time counts as Late (the generator or its worker pool could
	// not keep up). Default 5ms.
	LateAfter time.Duration
	// Build fills the i-th request: method, URI (path and query) and headers
	// and body. The Host header defaults to Addr (its first address). Required. Called from many
	// goroutines; req is reset before each call.
	Build func(i int64, req *fasthttp.Request)
	// Classify names a request's outcome; the statistics are kept per class.
	// Default DefaultClassify.
	Classify func(i int64, resp *fasthttp.Response, err error) string
	// Observe, if set, is called with every finished request, from the worker
	// goroutines, before resp is reused: it must not keep resp or its body.
	Observe func(o Outcome, resp *fasthttp.Response)
	// Client, if set, is used instead of a HostClient built for Addr.
	Client *fasthttp.HostClient
}

func (c *Config) setDefaults() {
	if c.Workers == 0 {
		c.Workers = int(min(max(c.Rate/20, 8), 1024))
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Grace == 0 {
		c.Grace = 2 * time.Second
	}
	if c.LateAfter == 0 {
		c.LateAfter = 5 * time.Millisecond
	}
	if c.Classify == nil {
		c.Classify = DefaultClassify
	}
}

// Validate reports the first problem of c as "invalid config: ...". Run calls
// it after applying the defaults.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("invalid config: loadgen: "+format, args...)
	}
	switch {
	case c.Rate <= 0 || math.IsInf(c.Rate, 0) || math.IsNaN(c.Rate):
		return bad("rate %v must be > 0", c.Rate)
	case c.Requests < 0 || c.Warmup < 0 || c.Duration < 0:
		return bad("negative requests or duration")
	case c.Requests == 0 && c.Duration == 0:
		return bad("one of Requests and Duration is required")
	case c.Build == nil:
		return bad("Build is required")
	case c.Workers < 1:
		return bad("workers %d must be >= 1", c.Workers)
	case c.Timeout < 0 || c.Grace < 0 || c.LateAfter < 0:
		return bad("negative timeout")
	}
	if err := CheckLoopback(c.Addr); err != nil {
		return bad("%v", err)
	}
	return nil
}

// total is the number of requests the schedule holds.
func (c *Config) total() int64 {
	if c.Requests > 0 {
		return c.Requests
	}
	return max(int64(math.Ceil(c.Rate*(c.Warmup+c.Duration).Seconds())), 1)
}

// CheckLoopback returns an error unless addr is host:port (or a
// comma-separated list of them) with hosts that are, or resolve only to,
// loopback addresses.
func CheckLoopback(addr string) error {
	if strings.Contains(addr, ",") { // several servers, dialed round-robin by fasthttp.HostClient
		for _, a := range strings.Split(addr, ",") {
			if err := CheckLoopback(a); err != nil {
				return err
			}
		}
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil {
		if !ip.IsLoopback() {
			return fmt.Errorf("address %q is not loopback: the load generator only loads this machine", addr)
		}
		return nil
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return fmt.Errorf("address %q: cannot resolve %s", addr, host)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("address %q resolves to %s, not loopback", addr, ip)
		}
	}
	return nil
}

// ClassError is the class of requests that got no HTTP answer (connection
// error or timeout).
const ClassError = "error"

// DefaultClassify names an outcome "error" for a transport error or timeout,
// the status code for a success ("202"), and the status code and API error
// code for an error answer ("409 SOLD_OUT").
func DefaultClassify(_ int64, resp *fasthttp.Response, err error) string {
	if err != nil {
		return ClassError
	}
	code := resp.StatusCode()
	s := strconv.Itoa(code)
	if code >= 400 {
		if c := ErrorCode(resp.Body()); c != "" {
			s += " " + c
		}
	}
	return s
}

// ErrorCode returns the code of an API error body {"error":{"code":"X",...}},
// or "" if body has none. It does not parse the whole body.
func ErrorCode(body []byte) string {
	i := bytes.Index(body, []byte(`"error"`))
	if i < 0 {
		return ""
	}
	return StringField(body[i:], "code")
}

// StringField returns the value of the first JSON string member called name
// in body ("" if none), without decoding the rest; escapes are not decoded.
// It is meant for flat, machine-written answers such as {"orderNo":"123"}.
func StringField(body []byte, name string) string {
	var key [72]byte
	k := append(append(append(key[:0], '"'), name...), '"')
	for off := 0; ; {
		i := bytes.Index(body[off:], k)
		if i < 0 {
			return ""
		}
		rest := body[off+i+len(k):]
		j := 0
		for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t' || rest[j] == '\n' || rest[j] == '\r') {
			j++
		}
		if j < len(rest) && rest[j] == ':' {
			j++
			for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t' || rest[j] == '\n' || rest[j] == '\r') {
				j++
			}
			if j < len(rest) && rest[j] == '"' {
				end := bytes.IndexByte(rest[j+1:], '"')
				if end < 0 {
					return ""
				}
				return string(rest[j+1 : j+1+end])
			}
			return ""
		}
		off += i + len(k)
	}
}

// Outcome is one finished (or failed) request.
type Outcome struct {
	Index     int64
	Class     string
	Status    int   // 0 when Err is set
	Err       error // transport error or timeout
	Warmup    bool  // scheduled during the warm-up: not in the statistics
	Scheduled time.Time
	Started   time.Time
	Done      time.Time
}

// Latency is the time from the scheduled start to the answer: what a buyer
// arriving at the scheduled time waited.
func (o Outcome) Latency() time.Duration { return o.Done.Sub(o.Scheduled) }

// ClassStats is the share of one outcome class in the measured window.
type ClassStats struct {
	Count int64 `json:"count"`
	// Rate is answers of this class that arrived within the window (whenever
	// they were scheduled) per second of Window.
	Rate    float64 `json:"per_second"`
	Latency Summary `json:"latency"` // from the scheduled time
	hist    *hdrhistogram.Histogram
	done    int64 // answers in the window
}

// Result is what a run measured. Everything but Scheduled, Sent, Abandoned
// and WarmupRequests is about the measured window only (requests scheduled
// at or after t0 + Warmup).
type Result struct {
	TargetRate     float64 `json:"target_rate"`
	Workers        int     `json:"workers"`
	Scheduled      int64   `json:"scheduled"`       // requests in the schedule
	Sent           int64   `json:"sent"`            // requests started (warm-up included)
	Abandoned      int64   `json:"abandoned"`       // never started: past Grace or cancelled
	WarmupRequests int64   `json:"warmup_requests"` // sent during the warm-up, not measured
	Measured       int64   `json:"measured"`        // measured requests finished, errors included
	Errors         int64   `json:"errors"`          // measured transport errors, timeouts and 5xx answers
	Late           int64   `json:"late"`            // measured requests started > LateAfter after their time
	LateAfterMs    float64 `json:"late_after_ms"`
	// Start is t0, the scheduled time of request 0.
	Start time.Time `json:"start"`
	// Window runs from t0 + Warmup to the last answer.
	Window  time.Duration `json:"-"`
	WindowS float64       `json:"window_s"` // Window in seconds
	// Throughput is answers other than errors that arrived within Window,
	// per second: what the server delivered while measured. Under overload
	// the window also serves warm-up requests that queued, so it counts
	// completions by arrival time, not by schedule.
	Throughput float64 `json:"throughput"`
	// Latency is from the scheduled time, every measured answer and error.
	Latency Summary `json:"latency"`
	// Service is from the actual start: what a closed-loop tool would report.
	Service Summary `json:"service"`
	// StartLag is from the scheduled time to the actual start.
	StartLag Summary                `json:"start_lag"`
	Classes  map[string]*ClassStats `json:"classes"`
	// ErrorSamples holds up to five distinct transport error messages.
	ErrorSamples []string `json:"error_samples,omitempty"`
	all          *hdrhistogram.Histogram
}

// Histogram returns the latency histogram (µs from the scheduled time) of
// class, or of every measured request for "". Nil if the class never occurred.
func (r *Result) Histogram(class string) *hdrhistogram.Histogram {
	if class == "" {
		return r.all
	}
	if c := r.Classes[class]; c != nil {
		return c.hist
	}
	return nil
}

// Count returns the measured count of class.
func (r *Result) Count(class string) int64 {
	if c := r.Classes[class]; c != nil {
		return c.Count
	}
	return 0
}

// ClassNames returns the classes seen, sorted.
func (r *Result) ClassNames() []string {
	out := make([]string, 0, len(r.Classes))
	for k := range r.Classes {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// recorder accumulates outcomes from every worker.
type recorder struct {
	mu        sync.Mutex
	lateAfter time.Duration
	warmupEnd time.Time
	inWindow  int64 // answers other than errors arrived at or after warmupEnd
	classes   map[string]*ClassStats
	all       *hdrhistogram.Histogram
	service   *hdrhistogram.Histogram
	lag       *hdrhistogram.Histogram
	warmup    int64
	measured  int64
	errors    int64
	late      int64
	lastDone  time.Time
	samples   []string
}

func (r *recorder) add(o Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	failed := o.Err != nil || o.Status >= 500
	inWindow := !o.Done.Before(r.warmupEnd)
	if o.Warmup {
		r.warmup++
		if !inWindow {
			return
		}
	}
	c := r.classes[o.Class]
	if c == nil {
		c = &ClassStats{hist: NewHistogram()}
		r.classes[o.Class] = c
	}
	if inWindow {
		c.done++
		if !failed {
			r.inWindow++
		}
		if o.Done.After(r.lastDone) {
			r.lastDone = o.Done
		}
	}
	if o.Warmup {
		return
	}
	r.measured++
	c.Count++
	lat := o.Latency()
	Record(c.hist, lat)
	Record(r.all, lat)
	Record(r.service, o.Done.Sub(o.Started))
	lag := o.Started.Sub(o.Scheduled)
	Record(r.lag, lag)
	if lag > r.lateAfter {
		r.late++
	}
	if failed {
		r.errors++
	}
	if o.Err != nil && len(r.samples) < 5 {
		msg := o.Err.Error()
		known := false
		for _, s := range r.samples {
			known = known || s == msg
		}
		if !known {
			r.samples = append(r.samples, msg)
		}
	}
}

// Run sends cfg's schedule and returns what it measured. It returns when every
// request was answered, failed or abandoned: at most Grace + Timeout after the
// last scheduled time. If ctx ends first, the requests not yet started are
// abandoned and Run returns the partial result with ctx's error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &generator{cfg: cfg, client: cfg.Client, n: cfg.total(), interval: float64(time.Second) / cfg.Rate}
	if g.client == nil {
		g.client = NewClient(cfg.Addr, cfg.Workers, cfg.Timeout)
		defer g.client.CloseIdleConnections()
	}
	// t0 lies a little ahead so that every worker is waiting when it comes.
	g.t0 = time.Now().Add(20 * time.Millisecond)
	g.warmupEnd = g.t0.Add(cfg.Warmup)
	g.rec = &recorder{
		lateAfter: cfg.LateAfter,
		warmupEnd: g.warmupEnd,
		classes:   map[string]*ClassStats{},
		all:       NewHistogram(),
		service:   NewHistogram(),
		lag:       NewHistogram(),
	}
	g.stopAt = g.at(g.n - 1).Add(cfg.Grace)
	// Host header: the first server's address (fasthttp.HostClient dials the
	// others round-robin).
	g.host, _, _ = strings.Cut(cfg.Addr, ",")

	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.work(ctx)
		}()
	}
	wg.Wait()
	res := g.result()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// generator is one Run: request i is due at t0 + i × interval.
type generator struct {
	cfg       Config
	client    *fasthttp.HostClient
	n         int64   // requests scheduled
	interval  float64 // ns between two
	t0        time.Time
	warmupEnd time.Time
	stopAt    time.Time // no request starts after it (the last one's time + Grace)
	host      string    // Host header of a request Build gives none
	rec       *recorder

	next, sent, abandoned atomic.Int64
}

// at is request i's scheduled time.
func (g *generator) at(i int64) time.Time { return g.t0.Add(time.Duration(float64(i) * g.interval)) }

// work is one worker: it takes the next request, waits for its time, sends
// it and records the outcome, until every request is taken. A request
// whose time comes after ctx ended or after stopAt is abandoned.
func (g *generator) work(ctx context.Context) {
	cfg := &g.cfg
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		i := g.next.Add(1) - 1
		if i >= g.n {
			return
		}
		sched := g.at(i)
		if d := time.Until(sched); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				timer.Stop()
				g.abandoned.Add(1)
				continue
			case <-timer.C:
			}
		}
		if ctx.Err() != nil || time.Now().After(g.stopAt) {
			g.abandoned.Add(1)
			continue
		}
		req.Reset()
		resp.Reset()
		cfg.Build(i, req)
		if len(req.Header.Host()) == 0 {
			req.Header.SetHost(g.host)
		}
		g.sent.Add(1)
		started := time.Now()
		err := g.client.DoTimeout(req, resp, cfg.Timeout)
		o := Outcome{Index: i, Err: err, Warmup: sched.Before(g.warmupEnd),
			Scheduled: sched, Started: started, Done: time.Now()}
		if err == nil {
			o.Status = resp.StatusCode()
		}
		o.Class = cfg.Classify(i, resp, err)
		g.rec.add(o)
		if cfg.Observe != nil {
			cfg.Observe(o, resp)
		}
	}
}

// result is what the workers measured, once they are done.
func (g *generator) result() *Result {
	rec, cfg := g.rec, &g.cfg
	res := &Result{
		TargetRate:     cfg.Rate,
		Workers:        cfg.Workers,
		Scheduled:      g.n,
		Sent:           g.sent.Load(),
		Abandoned:      g.abandoned.Load(),
		WarmupRequests: rec.warmup,
		Measured:       rec.measured,
		Errors:         rec.errors,
		Late:           rec.late,
		LateAfterMs:    float64(cfg.LateAfter) / float64(time.Millisecond),
		Start:          g.t0,
		Latency:        Summarize(rec.all),
		Service:        Summarize(rec.service),
		StartLag:       Summarize(rec.lag),
		Classes:        rec.classes,
		ErrorSamples:   rec.samples,
		all:            rec.all,
	}
	if !rec.lastDone.IsZero() {
		res.Window = rec.lastDone.Sub(g.warmupEnd)
		res.WindowS = res.Window.Seconds()
		if res.Window > 0 {
			res.Throughput = float64(rec.inWindow) / res.Window.Seconds()
		}
	}
	for _, c := range res.Classes {
		c.Latency = Summarize(c.hist)
		if res.Window > 0 {
			c.Rate = float64(c.done) / res.Window.Seconds()
		}
	}
	return res
}

// NewClient returns a HostClient for addr as the generator uses it: up to
// conns connections reused last-in first-out (so a healthy run keeps few
// open) and closed after a second idle, no retries (a retried POST would
// hide a failure and could duplicate an intent), no User-Agent header, and a
// plain dialer (loopback needs no DNS cache, and fasthttp's would keep a
// goroutine alive).
func NewClient(addr string, conns int, timeout time.Duration) *fasthttp.HostClient {
	dialer := &net.Dialer{Timeout: min(timeout, 3*time.Second)}
	return &fasthttp.HostClient{
		Addr:                      addr,
		Dial:                      func(a string) (net.Conn, error) { return dialer.Dial("tcp", a) },
		MaxConns:                  conns,
		MaxConnWaitTimeout:        timeout,
		MaxIdleConnDuration:       time.Second,
		MaxIdemponentCallAttempts: 1,
		RetryIfErr:                func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		ReadTimeout:               timeout,
		WriteTimeout:              timeout,
		ConnPoolStrategy:          fasthttp.LIFO,
		NoDefaultUserAgentHeader:  true,
		DisablePathNormalizing:    true,
	}
}
