package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

// audit waits for the pipeline to go idle for productID (at most IdleWait),
// reconciles it against docs/spec.md §5 and adds the scenario's own checks, which
// see the final report. Checks of the outbox are pipeline-wide (Reconcile's).
func (r *run) audit(ctx context.Context, productID int64, extra func(rep pipeline.Report, p pipeline.ProductAudit) []pipeline.Check) *Audit {
	a := &Audit{Orders: map[string]int64{}}
	started := time.Now()
	rep, err := r.reconcile(ctx, productID, true)
	a.IdleAfter = time.Since(started).Seconds()
	a.Idle = err == nil
	if err != nil {
		r.logf("   pipeline not idle after %s: %v", time.Since(started).Round(time.Millisecond), err)
	} else {
		r.logf("   pipeline idle after %s", time.Since(started).Round(time.Millisecond))
	}
	// The verdict is always a fresh reconciliation, idle or not.
	rep, err = r.reconcile(ctx, productID, false)
	if err != nil {
		a.Error = fmt.Sprintf("reconcile: %v", err)
		return a
	}
	if len(rep.Products) != 1 || rep.Products[0].ProductID != productID {
		a.Error = fmt.Sprintf("reconcile: product %d missing from the report", productID)
		return a
	}
	p := rep.Products[0]
	for _, s := range order.Statuses {
		if n := p.Orders[s][0]; n > 0 {
			a.Orders[string(s)] = n
		}
	}
	a.Checks = append(append(a.Checks, p.Checks...), rep.Checks...)
	// No scenario gives MySQL less stock than Redis, so an order can only
	// end FAILED through a bug (or a requestId reused across products).
	failed := p.Orders[order.Failed][0]
	a.Checks = append(a.Checks, check("no order FAILED", failed == 0, "%d FAILED orders", failed))
	if extra != nil {
		a.Checks = append(a.Checks, extra(rep, p)...)
	}
	a.Pass = a.Idle
	for _, c := range a.Checks {
		a.Pass = a.Pass && c.OK
	}
	return a
}

// reconcile runs pipeline.WaitIdle (wait) or pipeline.Reconcile for one
// product, or the test double.
func (r *run) reconcile(ctx context.Context, productID int64, wait bool) (pipeline.Report, error) {
	if r.env.audit != nil {
		return r.env.audit(ctx, productID)
	}
	if !wait {
		return pipeline.Reconcile(ctx, r.env.Redis, r.env.Store, []int64{productID})
	}
	wctx, cancel := context.WithTimeout(ctx, r.env.IdleWait)
	defer cancel()
	return pipeline.WaitIdle(wctx, r.env.Redis, r.env.Store, []int64{productID}, 250*time.Millisecond)
}

// check builds a scenario check.
func check(name string, ok bool, format string, args ...any) pipeline.Check {
	return pipeline.Check{Name: "bench: " + name, OK: ok, Detail: fmt.Sprintf(format, args...)}
}

// orderCount is the number of orders of p in any status.
func orderCount(p pipeline.ProductAudit) int64 {
	var n int64
	for _, c := range p.Orders {
		n += c[0]
	}
	return n
}
