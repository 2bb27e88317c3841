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
	p := r.p
	s := &ScenarioResult{}
	keys := int64(p.ReplayKeys)
	pid, err := r.createProduct(ctx, t, Replay, keys, 0)
	if err != nil {
		return s.fail(err)
	}
	s.ProductID = pid
	prefix := r.requestPrefix(t, "rp")
	nUsers := int64(len(r.users.ids))
	userOf := func(k int64) int { return int(k % nUsers) }

	// Fresh intake: every key once.
	nos := make([]string, keys)
	var fresh outcomes
	var mu sync.Mutex
	build := r.orderBuilder(pid, prefix, func(i int64) int { return userOf(i) }, func(i int64) int64 { return i })
	res, err := r.closedLoop(ctx, t, keys, build, func(o loadgen.Outcome, resp *fasthttp.Response) {
		fresh.observe(o, resp)
		if o.Class == classAccepted {
			no := loadgen.StringField(resp.Body(), "orderNo")
			mu.Lock()
			nos[o.Index] = no
			mu.Unlock()
		}
	})
	if err != nil || res == nil {
		return s.fail(fmt.Errorf("fresh intake: %v", err))
	}
	accepted, unknown := fresh.counts()
	r.logf("%s", closedLine("fresh intents accepted", res, classAccepted))
	s.figure("fresh intake, closed loop", classRate(res, classAccepted), "accepted/s")
	s.Latencies = map[string]loadgen.Summary{"fresh intake (202), service time": res.Service}

	// One more intent meets the empty stock: the gateway now answers the
	// product from its sold-out cache.
	late, err := r.closedLoop(ctx, t, 1, r.orderBuilder(pid, prefix, func(int64) int { return 0 }, func(int64) int64 { return keys }), nil)
	if err == nil && late.Count(classSoldOut) != 1 {
		err = fmt.Errorf("classes %v", late.ClassNames())
	}
	if err != nil {
		return s.fail(fmt.Errorf("sell-out request: %v", err))
	}
	r.logf("   sold out: %d accepted of %d units; waiting for the pipeline to store them", accepted, keys)
	if _, err := r.reconcile(ctx, pid, true); err != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("pipeline not idle before the replays: %v", err))
	}

	hz, err := r.healthz(ctx, t)
	if err != nil || hz == nil {
		return s.fail(fmt.Errorf("healthz: %v", err))
	}
	r.logf("%s", closedLine("GET /healthz", hz, ""))
	s.figure("bare GET /healthz, closed loop", hz.Throughput, "req/s")

	bgRedis, bgSelects, cerr := r.background(ctx)
	before, cerr2 := r.readSvcCounters(ctx)
	var mismatch, missing atomic.Int64
	storm, err := r.closedLoop(ctx, t, 0,
		r.orderBuilder(pid, prefix, func(i int64) int { return userOf(i % keys) }, func(i int64) int64 { return i % keys }),
		func(o loadgen.Outcome, resp *fasthttp.Response) {
			if o.Class != classReplay {
				return
			}
			want := nos[o.Index%keys]
			switch got := loadgen.StringField(resp.Body(), "orderNo"); {
			case want == "":
				missing.Add(1) // its first answer was lost
			case got != want:
				mismatch.Add(1)
			}
		})
	after, cerr3 := r.readSvcCounters(ctx)
	if err != nil || storm == nil {
		return s.fail(fmt.Errorf("replay storm: %v", err))
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
	} else {
		rp, sp, rraw, sraw := perRequest(before, after, bgRedis, bgSelects, replays)
		s.figure("Redis commands per replay", rp, "commands")
		s.figure("MySQL SELECTs per replay", sp, "queries")
		s.Notes = append(s.Notes, fmt.Sprintf("per replay before subtracting the idle background (%.0f Redis commands/s, %.1f SELECTs/s): %.3f Redis commands, %.4f MySQL SELECTs; the counters are service-wide",
			bgRedis, bgSelects, rraw, sraw))
		r.logf("   per replay: %.3f Redis commands, %.4f MySQL SELECTs (raw %.3f, %.4f)", rp, sp, rraw, sraw)
	}

	s.Audit = r.audit(ctx, pid, func(_ pipeline.Report, pa pipeline.ProductAudit) []pipeline.Check {
		others := storm.Measured - replays
		return []pipeline.Check{
			ordersCheck(orderCount(pa), accepted, unknown),
			check("every replay answered 200 with its orderNo", mismatch.Load() == 0 && others == 0,
				"%d replays answered another orderNo, %d answers other than 200 (classes %v), %d replays of intents whose 202 was lost",
				mismatch.Load(), others, storm.ClassNames(), missing.Load()),
		}
	})
	return s
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
