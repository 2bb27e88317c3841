package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/bench/loadgen"
)

// Closed-loop measurements (issue 19): ClosedConns connections, each sending
// its next request as soon as the previous one was answered, for
// ClosedDuration. Unlike the open-model phases this measures what the
// gateway can answer at most, and the same loop against GET /healthz in the
// same run gives the bare answer of the HTTP stack on this machine: the
// ratio of a path's rate to it says how close to "memory speed" the path is.
// Latencies of these runs are service times (from the actual send).

// closedLoop runs build for ClosedDuration (or, with requests > 0, for that
// many requests) over ClosedConns connections. It is loadgen.Run with every
// request due at once and ClosedConns workers: each worker's next request
// starts when its last was answered.
func (r *run) closedLoop(ctx context.Context, t *target, requests int64, build func(int64, *fasthttp.Request), observe func(loadgen.Outcome, *fasthttp.Response)) (*loadgen.Result, error) {
	return r.closedLoopCfg(ctx, t, requests, build, observe, nil)
}

func (r *run) closedLoopCfg(ctx context.Context, t *target, requests int64, build func(int64, *fasthttp.Request), observe func(loadgen.Outcome, *fasthttp.Response), mod func(*loadgen.Config)) (*loadgen.Result, error) {
	return r.closedLoopFor(ctx, t, r.p.ClosedDuration, requests, build, observe, mod)
}

// closedLoopFor is closedLoopCfg with the run's length d in place of
// ClosedDuration (used when requests is 0); mod may change the load's
// config, its Workers (the connections) included.
func (r *run) closedLoopFor(ctx context.Context, t *target, d time.Duration, requests int64, build func(int64, *fasthttp.Request), observe func(loadgen.Outcome, *fasthttp.Response), mod func(*loadgen.Config)) (*loadgen.Result, error) {
	cfg := r.loadConfig(t)
	cfg.Workers = r.p.ClosedConns
	if mod != nil {
		mod(&cfg) // may set another number of connections
	}
	cfg.Rate = 1e9 // one request per ns: every request is due at once
	cfg.LateAfter = time.Duration(math.MaxInt64)
	cfg.Build, cfg.Observe = build, observe
	if requests > 0 {
		cfg.Requests = requests
		cfg.Grace = 10 * time.Minute
	} else {
		// More than any gateway answers in ClosedDuration; those not started
		// when the grace ends are abandoned, which ends the run.
		cfg.Requests = int64(2e6 * d.Seconds())
		cfg.Grace = d
	}
	return loadgen.Run(ctx, cfg)
}

// healthz measures GET /healthz closed-loop: the bare answer.
func (r *run) healthz(ctx context.Context, t *target) (*loadgen.Result, error) {
	return r.healthzFor(ctx, t, r.p.ClosedDuration, r.p.ClosedConns)
}

// healthzFor is healthz for d over conns connections.
func (r *run) healthzFor(ctx context.Context, t *target, d time.Duration, conns int) (*loadgen.Result, error) {
	return r.closedLoopFor(ctx, t, d, 0, func(_ int64, req *fasthttp.Request) { req.SetRequestURI("/healthz") }, nil,
		func(c *loadgen.Config) {
			c.Classify = nil // "200", not an order's "200 replay"
			c.Workers = conns
		})
}

// closedLine is one log line of a closed-loop run.
func closedLine(name string, res *loadgen.Result, class string) string {
	rate := res.Throughput
	if class != "" {
		rate = classRate(res, class)
	}
	return fmt.Sprintf("   closed loop, %d connections: %s %s/s (service p50 %s, p99 %s; classes %v)",
		res.Workers, name, fmtNum(rate), fmtMs(res.Service.P50), fmtMs(res.Service.P99), res.ClassNames())
}

// svcCounters are the service-wide command counts read around a phase:
// Redis's total_commands_processed (INFO stats) and MySQL's Com_select
// (SHOW GLOBAL STATUS). They count every client of the shared services,
// the pipeline roles of this process included.
type svcCounters struct {
	redis, selects int64
	at             time.Time
}

func (r *run) readSvcCounters(ctx context.Context) (svcCounters, error) {
	c := svcCounters{at: time.Now()}
	info, err := r.env.Redis.Info(ctx, "stats").Result()
	if err != nil {
		return c, fmt.Errorf("redis INFO stats: %w", err)
	}
	found := false
	for _, line := range strings.Split(info, "\n") {
		// Summed over the answer (one line per server).
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return c, fmt.Errorf("redis INFO stats: %q: %w", line, err)
			}
			c.redis += n
			found = true
		}
	}
	if !found {
		return c, errors.New("redis INFO stats: no total_commands_processed")
	}
	var name string
	if err := r.env.Store.DB.QueryRowContext(ctx, `SHOW GLOBAL STATUS LIKE 'Com_select'`).Scan(&name, &c.selects); err != nil {
		return c, fmt.Errorf("mysql Com_select: %w", err)
	}
	return c, nil
}

// perRequest is (b − a − background over the same time) / n for both
// svcCounters, with background the rates of an idle second measured before.
func perRequest(a, b svcCounters, bgRedis, bgSelects float64, n int64) (redisPer, selectsPer, redisRaw, selectsRaw float64) {
	if n <= 0 {
		return 0, 0, 0, 0
	}
	d := b.at.Sub(a.at).Seconds()
	redisRaw = float64(b.redis-a.redis) / float64(n)
	selectsRaw = float64(b.selects-a.selects) / float64(n)
	redisPer = max(float64(b.redis-a.redis)-bgRedis*d, 0) / float64(n)
	selectsPer = max(float64(b.selects-a.selects)-bgSelects*d, 0) / float64(n)
	return
}

// background is the svcCounters' rates per second over one idle second.
func (r *run) background(ctx context.Context) (redisPerS, selectsPerS float64, err error) {
	a, err := r.readSvcCounters(ctx)
	if err != nil {
		return 0, 0, err
	}
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(time.Second):
	}
	b, err := r.readSvcCounters(ctx)
	if err != nil {
		return 0, 0, err
	}
	d := b.at.Sub(a.at).Seconds()
	return float64(b.redis-a.redis) / d, float64(b.selects-a.selects) / d, nil
}

// soldOutClosedLoop adds to the soldout scenario s the closed-loop rate of
// GET /healthz and of sold-out rejections of fresh buyers (new requestIds,
// every buyer in turn), one after the other in the same run, and their ratio.
func (r *run) soldOutClosedLoop(ctx context.Context, t *target, s *ScenarioResult, pid int64, prefix string, observe func(loadgen.Outcome, *fasthttp.Response)) {
	hz, err := r.healthz(ctx, t)
	if err != nil || hz == nil {
		s.Notes = append(s.Notes, fmt.Sprintf("closed-loop healthz: %v", err))
		return
	}
	r.logf("%s", closedLine("GET /healthz", hz, ""))
	nUsers := int64(len(r.users.ids))
	const off = 1 << 40 // requestIds of their own
	res, err := r.closedLoop(ctx, t, 0, r.orderBuilder(pid, prefix, func(i int64) int { return int(i % nUsers) }, func(i int64) int64 { return off + i }), observe)
	if err != nil || res == nil {
		s.Notes = append(s.Notes, fmt.Sprintf("closed-loop sold-out storm: %v", err))
		return
	}
	r.logf("%s", closedLine("sold-out rejections", res, classSoldOut))
	rate := classRate(res, classSoldOut)
	s.figure("bare GET /healthz, closed loop", hz.Throughput, "req/s")
	s.figure("sold-out rejections, closed loop", rate, "rejections/s")
	if hz.Throughput > 0 {
		s.figure("sold-out rejections / bare healthz", rate/hz.Throughput, "×")
	}
	if s.Latencies == nil {
		s.Latencies = map[string]loadgen.Summary{}
	}
	s.Latencies["closed loop: GET /healthz, service time"] = hz.Service
	s.Latencies["closed loop: 409 SOLD_OUT, service time"] = res.Service
	s.Notes = append(s.Notes, fmt.Sprintf("closed loop: %d connections, %s each, GET /healthz first, then fresh buyers' intents for the sold-out product; the figures are answers per second over each run",
		r.p.ClosedConns, r.p.ClosedDuration))
}
