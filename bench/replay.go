package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/bench/loadgen"
	"github.com/stampede-sh/stampede/pipeline"
)

// runReplay (issue 19): ReplayKeys fresh intents from as many buyers are
// accepted closed-loop (the fresh intake rate), which sells the product out;
// once the pipeline has stored them, GET /healthz and then a replay storm —
// the accepted intents re-sent, round after round — run closed-loop for
// ClosedDuration each. It reports the replay rate, its ratio to the bare
// answer, and the Redis commands and MySQL SELECTs per replay (service-wide
// counters, less the rate of an idle second measured just before).
func runReplay(ctx context.Context, r *run, t *target) *ScenarioResult {
	s := &ScenarioResult{}
	keys := int64(r.p.ReplayKeys)
	pid, err := r.createProduct(ctx, t, Replay, keys, 0)
	if err != nil {
		return s.fail(err)
	}
	s.ProductID = pid
	rp := &replayRun{r: r, t: t, s: s, pid: pid, keys: keys, prefix: r.requestPrefix(t, "rp"),
		nUsers: int64(len(r.users.ids)), nos: make([]string, keys)}
	accepted, unknown, err := rp.freshIntake(ctx)
	if err != nil {
		return s.fail(err)
	}
	hz, err := r.healthz(ctx, t)
	if err != nil || hz == nil {
		return s.fail(fmt.Errorf("healthz: %v", err))
	}
	r.logf("%s", closedLine("GET /healthz", hz, ""))
	s.figure("bare GET /healthz, closed loop", hz.Throughput, "req/s")
	storm, err := rp.storm(ctx, hz)
	if err != nil {
		return s.fail(err)
	}
	s.Audit = r.audit(ctx, pid, func(_ pipeline.Report, pa pipeline.ProductAudit) []pipeline.Check {
		replays := storm.Count(classReplay)
		others := storm.Measured - replays
		return []pipeline.Check{
			ordersCheck(orderCount(pa), accepted, unknown),
			check("every replay answered 200 with its orderNo", rp.mismatch.Load() == 0 && others == 0,
				"%d replays answered another orderNo, %d answers other than 200 (classes %v), %d replays of intents whose 202 was lost",
				rp.mismatch.Load(), others, storm.ClassNames(), rp.missing.Load()),
		}
	})
	return s
}

// replayRun is one replay scenario: its product, its keys (intent k is
// buyer k mod nUsers's) and the orderNo each fresh intent was accepted with.
type replayRun struct {
	r      *run
	t      *target
	s      *ScenarioResult
	pid    int64
	keys   int64
	prefix string
	nUsers int64
	nos    []string // key → orderNo of its 202 ("": its answer was lost)

	mismatch, missing atomic.Int64 // replays answered another orderNo; replays of keys without one
}

func (rp *replayRun) userOf(k int64) int { return int(k % rp.nUsers) }

// freshIntake sends every key once closed-loop, then one intent more that
// meets the empty stock (the gateway then answers the product from its
// sold-out cache), and waits for the pipeline to store the orders.
// accepted and unknown count the fresh intake's outcomes.
func (rp *replayRun) freshIntake(ctx context.Context) (accepted, unknown int64, err error) {
	r, s := rp.r, rp.s
	var fresh outcomes
	var mu sync.Mutex
	build := r.orderBuilder(rp.pid, rp.prefix, rp.userOf, func(i int64) int64 { return i })
	res, err := r.closedLoop(ctx, rp.t, rp.keys, build, func(o loadgen.Outcome, resp *fasthttp.Response) {
		fresh.observe(o, resp)
		if o.Class == classAccepted {
			no := loadgen.StringField(resp.Body(), "orderNo")
			mu.Lock()
			rp.nos[o.Index] = no
			mu.Unlock()
		}
	})
	if err != nil || res == nil {
		return 0, 0, fmt.Errorf("fresh intake: %v", err)
	}
	accepted, unknown = fresh.counts()
	r.logf("%s", closedLine("fresh intents accepted", res, classAccepted))
	s.figure("fresh intake, closed loop", classRate(res, classAccepted), "accepted/s")
	s.Latencies = map[string]loadgen.Summary{"fresh intake (202), service time": res.Service}

	late, err := r.closedLoop(ctx, rp.t, 1, r.orderBuilder(rp.pid, rp.prefix, func(int64) int { return 0 }, func(int64) int64 { return rp.keys }), nil)
	if err == nil && late.Count(classSoldOut) != 1 {
		err = fmt.Errorf("classes %v", late.ClassNames())
	}
	if err != nil {
		return 0, 0, fmt.Errorf("sell-out request: %v", err)
	}
	r.logf("   sold out: %d accepted of %d units; waiting for the pipeline to store them", accepted, rp.keys)
	if _, err := r.reconcile(ctx, rp.pid, true); err != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("pipeline not idle before the replays: %v", err))
	}
	return accepted, unknown, nil
}

// storm re-sends the accepted intents round after round closed-loop,
// checks each replay's orderNo, and reports the replay rate (against hz,
// the bare GET /healthz) and the Redis commands and MySQL SELECTs per
// replay.
func (rp *replayRun) storm(ctx context.Context, hz *loadgen.Result) (*loadgen.Result, error) {
	r, s, keys := rp.r, rp.s, rp.keys
	bgRedis, bgSelects, cerr := r.background(ctx)
	before, cerr2 := r.readSvcCounters(ctx)
	storm, err := r.closedLoop(ctx, rp.t, 0,
		r.orderBuilder(rp.pid, rp.prefix, func(i int64) int { return rp.userOf(i % keys) }, func(i int64) int64 { return i % keys }),
		func(o loadgen.Outcome, resp *fasthttp.Response) {
			if o.Class != classReplay {
				return
			}
			want := rp.nos[o.Index%keys]
			switch got := loadgen.StringField(resp.Body(), "orderNo"); {
			case want == "":
				rp.missing.Add(1) // its first answer was lost
			case got != want:
				rp.mismatch.Add(1)
			}
		})
	after, cerr3 := r.readSvcCounters(ctx)
	if err != nil || storm == nil {
		return nil, fmt.Errorf("replay storm: %v", err)
	}
	r.logf("%s", closedLine("replays answered", storm, classReplay))
	replays := storm.Count(classReplay)
	rate := classRate(storm, classReplay)
	s.Headline = Figure{Name: "replays (200), closed loop", Value: rate, Unit: "replays/s"}
	s.HeadlineLatency = storm.Service
	s.Latencies["replay (200), service time"] = storm.Service
	s.Latencies["GET /healthz, service time"] = hz.Service
	if hz.Throughput > 0 {
		s.figure("replays / bare healthz", rate/hz.Throughput, "×")
	}
	s.figure("replays answered 200", float64(replays), "requests")
	if err := firstErr(cerr, cerr2, cerr3); err != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("no command counts: %v", err))
		return storm, nil
	}
	rpr, sp, rraw, sraw := perRequest(before, after, bgRedis, bgSelects, replays)
	s.figure("Redis commands per replay", rpr, "commands")
	s.figure("MySQL SELECTs per replay", sp, "queries")
	s.Notes = append(s.Notes, fmt.Sprintf("per replay before subtracting the idle background (%.0f Redis commands/s, %.1f SELECTs/s): %.3f Redis commands, %.4f MySQL SELECTs; the counters are service-wide",
		bgRedis, bgSelects, rraw, sraw))
	r.logf("   per replay: %.3f Redis commands, %.4f MySQL SELECTs (raw %.3f, %.4f)", rpr, sp, rraw, sraw)
	return storm, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
