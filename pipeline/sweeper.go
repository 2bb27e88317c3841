package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// SweeperConfig configures a Sweeper. Zero fields take the documented default.
type SweeperConfig struct {
	// Interval is the pause between two sweeps that found nothing more to
	// do. Default 1s.
	Interval time.Duration
	// BatchSize is the most due orders read per query; a full batch is
	// followed by the next one at once. Default 500.
	BatchSize int
	// ErrorBackoff bounds the pause after a failed query (MySQL down); it
	// doubles from Interval up to this. Default 30s.
	ErrorBackoff time.Duration
	// Logger receives warnings and errors. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the sweeper's series, among them the drift of every
	// reconciliation. Default: private, unregistered.
	Metrics *Metrics

	// Redis, when set, makes the sweeper reconcile every product (Reconcile)
	// every ReconcileInterval and export the drift per product. Default nil:
	// no reconciliation.
	Redis redis.UniversalClient
	// ReconcileInterval is the period of the reconciliation. Default 30s; a
	// negative value turns it off.
	ReconcileInterval time.Duration
	// ReconcileTimeout bounds one reconciliation. Default 30s.
	ReconcileTimeout time.Duration
	// LostGrace is the age after which a Redis reservation with neither an
	// intake entry nor a MySQL order counts as lost and is released
	// (RepairLostReservations), before each reconciliation. Default 2m;
	// negative: off.
	LostGrace time.Duration
}

func (c *SweeperConfig) setDefaults() {
	setDur(&c.Interval, time.Second)
	setDur(&c.ReconcileInterval, 30*time.Second)
	setDur(&c.ReconcileTimeout, 30*time.Second)
	setDur(&c.LostGrace, 2*time.Minute)
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	setDur(&c.ErrorBackoff, 30*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field.
func (c *SweeperConfig) Validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("invalid config: sweeper interval %v", c.Interval)
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return fmt.Errorf("invalid config: sweeper batch size %d not in 1…10000", c.BatchSize)
	case c.ErrorBackoff < c.Interval:
		return fmt.Errorf("invalid config: sweeper error backoff %v below interval %v", c.ErrorBackoff, c.Interval)
	case c.ReconcileTimeout <= 0:
		return fmt.Errorf("invalid config: sweeper reconcile timeout %v", c.ReconcileTimeout)
	}
	return nil
}

// SweeperStats counts what a Sweeper did since it was made.
type SweeperStats struct {
	Closed int64 // orders this sweeper moved WAITING_PAY → CANCELLED
	Lost   int64 // due orders another closer (sweeper, close message, payment) got first
	Errors int64 // failed queries or closes
	// Reconciles counts finished reconciliations (any result).
	Reconciles int64
	// LostReleased counts reservations released as lost.
	LostReleased int64
}

// Sweeper closes WAITING_PAY orders whose pay deadline has passed on the
// database clock (SPEC §1 "sweeper"): the safety net under the delayed close
// message, which can be late (a per-message TTL expires only at the head of
// its queue) or lost with a broker. It uses the same
// persistence.Store.CloseOrder as every other closer, with Due set, so the
// conditional update decides the one winner: several sweepers, the close
// consumer and a racing payment can never both win, and a paid order is never
// cancelled. Its release of MySQL stock happens in the same transaction; the
// Redis release follows through the CANCELLED status event.
type Sweeper struct {
	cfg   SweeperConfig
	store *persistence.Store
	log   *slog.Logger
	m     *Metrics

	closed, lost, errs, reconciles, lostReleased atomic.Int64
}

// NewSweeper returns a Sweeper; cfg is completed with defaults and validated.
func NewSweeper(store *persistence.Store, cfg SweeperConfig) (*Sweeper, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sweeper{cfg: cfg, store: store, log: cfg.Logger.With("component", "sweeper"), m: orNew(cfg.Metrics)}, nil
}

// Stats returns the counters so far.
func (s *Sweeper) Stats() SweeperStats {
	return SweeperStats{Closed: s.closed.Load(), Lost: s.lost.Load(), Errors: s.errs.Load(), Reconciles: s.reconciles.Load(),
		LostReleased: s.lostReleased.Load()}
}

// Run sweeps every Interval, and reconciles every ReconcileInterval when
// Redis is set, until ctx is cancelled; it returns nil then.
func (s *Sweeper) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if s.cfg.Redis != nil && s.cfg.ReconcileInterval > 0 {
		wg.Go(func() { s.reconcileLoop(ctx) })
	}
	defer wg.Wait()
	bo := newBackoff(s.cfg.Interval, s.cfg.ErrorBackoff)
	for ctx.Err() == nil {
		more, err := s.Sweep(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			s.log.Warn("sweeper: sweep failed", "err", err)
			sleep(ctx, bo.next())
		case more:
			bo.reset()
		default:
			bo.reset()
			sleep(ctx, s.cfg.Interval)
		}
	}
	return nil
}

// Sweep closes one batch of due orders. more reports that the batch was full
// and at least one order was closed, so another batch may be due at once.
// A close lost to another closer is normal and not an error.
func (s *Sweeper) Sweep(ctx context.Context) (more bool, err error) {
	due, err := s.store.DueOrders(ctx, s.cfg.BatchSize)
	if err != nil {
		s.errs.Add(1)
		return false, fmt.Errorf("sweeper: %w", err)
	}
	// Several sweepers read the same oldest-first list; starting at
	// different places makes them contend less on the same rows.
	rand.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	closed := 0
	var firstErr error
	for _, no := range due {
		_, err := s.store.CloseOrder(ctx, persistence.CloseRequest{OrderNo: no, Reason: order.ReasonTimeout,
			From: []order.Status{order.WaitingPay}, Due: true})
		switch {
		case err == nil:
			closed++
			s.closed.Add(1)
			s.m.sweeperClosed.Inc()
		case errors.Is(err, persistence.ErrInvalidState), errors.Is(err, persistence.ErrNotDue), errors.Is(err, persistence.ErrNotFound):
			s.lost.Add(1)
		case ctx.Err() != nil:
			return false, nil
		default:
			s.errs.Add(1)
			if firstErr == nil {
				firstErr = err
			}
			s.log.Error("sweeper: close failed", "orderNo", no, "err", err)
		}
	}
	if firstErr != nil && closed == 0 {
		return false, fmt.Errorf("sweeper: %w", firstErr)
	}
	return len(due) == s.cfg.BatchSize && closed > 0, nil
}

// reconcileLoop runs Reconcile over every product each ReconcileInterval
// (the first run after one interval) and exports the drift per product. A
// drift while the product has no intake backlog and no PROCESSING order is
// logged at warn (a release on its way to Redis can still explain it for a
// moment; a real drift stays, run after run).
func (s *Sweeper) reconcileLoop(ctx context.Context) {
	for sleep(ctx, s.cfg.ReconcileInterval) {
		if s.cfg.LostGrace > 0 {
			s.RepairLost(ctx)
		}
		if applied, err := RepairAdjustments(ctx, s.cfg.Redis, s.store); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sweeper: stock repair sync failed", "err", err)
			}
		} else if len(applied) > 0 {
			s.log.Warn("sweeper: applied stock repairs missing in Redis", "repairNos", applied)
		}
		s.ReconcileOnce(ctx)
	}
}

// RepairLost runs RepairLostReservations once with LostGrace, counting and
// logging what it released.
func (s *Sweeper) RepairLost(ctx context.Context) (LostReport, error) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.ReconcileTimeout)
	defer cancel()
	rep, err := RepairLostReservations(rctx, s.cfg.Redis, s.store, LostConfig{Grace: s.cfg.LostGrace})
	for _, no := range rep.Released {
		s.log.Warn("sweeper: released a reservation that never became an order", "orderNo", no)
	}
	s.lostReleased.Add(int64(len(rep.Released)))
	s.m.lostReleased.Add(float64(len(rep.Released)))
	if err != nil && ctx.Err() == nil {
		s.log.Warn("sweeper: lost reservation repair failed", "err", err)
	}
	return rep, err
}

// ReconcileOnce runs one reconciliation, exports its drift and returns its
// report.
func (s *Sweeper) ReconcileOnce(ctx context.Context) (Report, error) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.ReconcileTimeout)
	defer cancel()
	rep, err := Reconcile(rctx, s.cfg.Redis, s.store, nil)
	s.reconciles.Add(1)
	s.m.reconLastRunAt.SetToCurrentTime()
	if err != nil {
		if ctx.Err() == nil {
			s.m.reconRuns.WithLabelValues("error").Inc()
			s.log.Warn("sweeper: reconcile failed", "err", err)
		}
		return rep, err
	}
	result := "ok"
	if !rep.OK {
		result = "failed"
	}
	s.m.reconRuns.WithLabelValues(result).Inc()
	for _, p := range rep.Products {
		s.m.setDrift(p.ProductID, p.Drift, p.IntakeBacklog)
		if p.Drift != 0 && p.IntakeBacklog == 0 && p.byStatus[order.Processing].Orders == 0 {
			s.log.Warn("sweeper: reconcile drift with no order in flight", "productId", p.ProductID, "drift", p.Drift,
				"redisAvailable", p.RedisAvailable, "total", p.Total, "adjust", p.Adjust)
		}
	}
	return rep, nil
}
