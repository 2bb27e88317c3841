package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/stampede-sh/stampede/lua"
)

// The hot period of a sale (Sweeper): reconciliation rounds wait while this
// sweeper's close passes closed more than hotCloses orders in the last
// hotWindow, while orders wait for their close more than hotOverdue past
// their pay deadline (passes slowed down under load report few closes in the
// window: the round's reads would then slow them further), or while some
// product has more than hotBacklog intake entries not yet written to MySQL. 1,000 closes in 5 s (200/s) is well above what a
// shop's unpaid orders add up to outside a sale and well below a sale's
// close rate (thousands per second); 1,000 intake entries are a fraction of
// a second of a drain.
const (
	hotWindow  = 5 * time.Second
	hotCloses  = 1000
	hotBacklog = 1000
	hotOverdue = time.Second
)

// closeWindow counts the orders closed in the last hotWindow. Safe for
// concurrent use (one close loop per part adds to it).
type closeWindow struct {
	mu     sync.Mutex
	events []closeEvent // oldest first, none older than hotWindow after add
}

type closeEvent struct {
	at time.Time
	n  int
}

// add records n orders closed at at (n = 0: only prunes).
func (w *closeWindow) add(at time.Time, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.prune(at)
	if n > 0 {
		w.events = append(w.events, closeEvent{at, n})
	}
}

// since returns the orders closed in the hotWindow before now.
func (w *closeWindow) since(now time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.prune(now)
	total := 0
	for _, e := range w.events {
		total += e.n
	}
	return total
}

func (w *closeWindow) prune(now time.Time) {
	i := 0
	for i < len(w.events) && now.Sub(w.events[i].at) > hotWindow {
		i++
	}
	w.events = w.events[i:]
}

// hot reports whether a sale is in its hot period (see Sweeper) and why:
// "closes", "closes overdue" or "intake backlog" ("" when not). A failure to read the intake
// backlog counts as not hot: the round then runs and reports the failure.
func (s *Sweeper) hot(ctx context.Context) string {
	if s.recent.since(time.Now()) > hotCloses {
		return "closes"
	}
	if d, ok, err := s.store.NextDue(ctx); err == nil && ok && d < -hotOverdue {
		return "closes overdue"
	}
	products, err := s.store.ListProducts(ctx)
	if err != nil {
		return ""
	}
	for _, p := range products {
		var backlog int64
		for shard := range max(p.Shards, 1) {
			n, err := intakeBacklog(ctx, s.cfg.Redis, lua.ShardKeys(p.ID, shard).Intake())
			if err != nil {
				return ""
			}
			backlog += n
		}
		if backlog > hotBacklog {
			return "intake backlog"
		}
	}
	return ""
}

// awaitCool waits, polling every Interval, until the hot period ends or
// ReconcileDeferMax passed; false when ctx ended first. Each deferral is
// counted (stampede_sweeper_passes_total{pass="reconcile",result="deferred"})
// and the first of a hot period logged at debug.
func (s *Sweeper) awaitCool(ctx context.Context) bool {
	if s.cfg.ReconcileDeferMax < 0 {
		return ctx.Err() == nil
	}
	until := time.Now().Add(s.cfg.ReconcileDeferMax)
	for first := true; time.Now().Before(until); first = false {
		why := s.hot(ctx)
		if why == "" {
			break
		}
		if first {
			s.log.Debug("sweeper: reconcile round deferred: sale in its hot period", "why", why)
		}
		s.m.sweeperPasses.WithLabelValues("reconcile", "deferred").Inc()
		if !sleep(ctx, s.cfg.Interval) {
			return false
		}
	}
	return ctx.Err() == nil
}
