package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// SweeperConfig configures a Sweeper. Zero fields take the documented default.
type SweeperConfig struct {
	// Interval is the longest pause between two close passes of a part
	// that found nothing more to do (the pass after one that closed less
	// than a batch starts when the earliest pay deadline falls due, at least
	// Interval/20 later), and the error backoff's start. Default 1s.
	Interval time.Duration
	// BatchSize is the most due orders closed per pass, in one transaction
	// (persistence.Store.CloseDueBatch); a full pass is followed by the next
	// one at once. Default 2000 (persistence.MaxLockBatch): at the drain's
	// 6,000 orders/s a pass of 500 closed too slowly to stay within 2 s of
	// the deadlines (measured in the bench's drain scenario).
	BatchSize int
	// Workers is the number of close passes that run at the same time, each
	// over its own part of the due orders (persistence.Store.CloseDuePart:
	// id MOD Workers), under its own advisory lock. Every sweeper of a
	// deployment must use the same value (STAMPEDE_SWEEP_WORKERS); should two
	// differ, their parts overlap and the overlapping passes still close
	// each order once (SKIP LOCKED, conditional update), with wasted
	// attempts. Default 4 (2 fell behind a 16,000 orders/s drain in the bench's
	// drain scenario, 4 kept up with 15,000–25,000); 1…persistence.MaxCloseParts.
	Workers int
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
	// ReconcileDeferMax bounds how long a due reconciliation round waits for
	// the hot period of a sale to end (see Sweeper): after it, the round
	// runs anyway. Default 5m; negative: rounds are never deferred.
	ReconcileDeferMax time.Duration
	// LostGrace is the age after which a Redis reservation with neither an
	// intake entry nor a MySQL order counts as lost and is released
	// (RepairLostReservations), before each reconciliation. Default 2m;
	// negative: off.
	LostGrace time.Duration
	// OutboxRetention is how long SENT outbox rows are kept: each close pass
	// also deletes up to PurgeBatch SENT rows published longer ago than this
	// (persistence.PurgeSentOutbox), so the table holds the events in flight
	// and a window of history, not every event ever. A dead letter whose
	// outbox row was purged cannot be replayed through the outbox. Default
	// 168h (7 days); negative: keep every row.
	OutboxRetention time.Duration
	// PurgeBatch bounds the rows one pass deletes. Default 5000.
	PurgeBatch int
	// RequestTTL is the gateways' idempotency record lifetime: the repair
	// of writes Redis lost (RepairLostWrites, after each reconciliation that
	// finds a product drifting with nothing in flight) examines the orders
	// accepted within it. Default order.DefaultRequestTTL.
	RequestTTL time.Duration
}

func (c *SweeperConfig) setDefaults() {
	c.Interval = cmp.Or(c.Interval, time.Second)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, 30*time.Second)
	c.ReconcileTimeout = cmp.Or(c.ReconcileTimeout, 30*time.Second)
	c.LostGrace = cmp.Or(c.LostGrace, 2*time.Minute)
	c.OutboxRetention = cmp.Or(c.OutboxRetention, 7*24*time.Hour)
	c.RequestTTL = cmp.Or(c.RequestTTL, order.DefaultRequestTTL)
	c.PurgeBatch = cmp.Or(c.PurgeBatch, 5000)
	c.BatchSize = cmp.Or(c.BatchSize, 2000)
	c.Workers = cmp.Or(c.Workers, 4)
	c.ReconcileDeferMax = cmp.Or(c.ReconcileDeferMax, 5*time.Minute)
	c.ErrorBackoff = cmp.Or(c.ErrorBackoff, 30*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field.
func (c *SweeperConfig) Validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("invalid config: sweeper interval %v", c.Interval)
	case c.PurgeBatch < 1 || c.PurgeBatch > 100000:
		return fmt.Errorf("invalid config: sweeper purge batch %d not in 1…100000", c.PurgeBatch)
	case c.BatchSize < 1 || c.BatchSize > persistence.MaxLockBatch:
		return fmt.Errorf("invalid config: sweeper batch size %d not in 1…%d", c.BatchSize, persistence.MaxLockBatch)
	case c.Workers < 1 || c.Workers > persistence.MaxCloseParts:
		return fmt.Errorf("invalid config: sweeper workers %d not in 1…%d", c.Workers, persistence.MaxCloseParts)
	case c.ErrorBackoff < c.Interval:
		return fmt.Errorf("invalid config: sweeper error backoff %v below interval %v", c.ErrorBackoff, c.Interval)
	case c.ReconcileTimeout <= 0:
		return fmt.Errorf("invalid config: sweeper reconcile timeout %v", c.ReconcileTimeout)
	}
	return nil
}

// Sweeper closes WAITING_PAY orders whose pay deadline has passed on the
// database clock (docs/spec.md §1 "sweeper"). With the batch order-lock design (the
// default) it is the closer of unpaid orders: no delayed close message is
// scheduled, and each pass closes up to BatchSize due orders in one
// set-based transaction (persistence.Store.CloseDuePart). A pass that
// filled its batch is followed by the next at once, one that closed fewer by
// the next when the earliest pay deadline falls due (at least Interval/20
// and at most Interval later: persistence.Store.NextDue): an order is closed
// about one pass after its deadline, whether closes are rare or a sale's
// orders fall due by the thousand. The closed orders' statuses are recorded
// in Redis for replays by a goroutine of their own, off the passes' path.
// It is also the safety net under a delayed close message
// (persistence.PayTimeoutMessage, of the per-order lock Store.LockStock),
// which can be late (a per-message TTL expires only at the head of
// its queue) or lost with a broker. Every close is a conditional update from
// WAITING_PAY, so several sweepers, the close consumer and a racing payment
// can never both win, and a paid order is never cancelled. Its release of
// MySQL stock happens in the same transaction; the Redis release follows
// through the CANCELLED status event.
//
// The due orders are split into Workers disjoint parts (id MOD Workers), and
// each sweeper runs one close loop per part, so Workers passes run at the
// same time: a sale where nobody pays falls due at the rate it was locked,
// faster than one pass after another can close it. Many sweepers (one per
// process with the sweeper role) share the work without duplicating it. A
// close pass over part k runs only while holding the MySQL advisory lock
// "close" of part k of the database (persistence.Store.TryLock: GET_LOCK on a
// pinned connection, released after the batch); a sweeper that finds it held
// skips that pass (stampede_sweeper_passes_total{pass="close",result="skipped"}).
// Passes over one part are therefore serial and each reads the part's due
// list after the previous pass committed its closes: no sweeper tries an
// order another sweeper closed. The lock lives in the server session, so a
// sweeper that dies or loses its connection mid-pass frees it at once and the
// next sweeper carries on; the orders that sweeper had not closed are still
// WAITING_PAY and due. Should the lock ever fail (a network partition keeping
// a dead holder's session open until the server times it out), passes merely
// wait; and two overlapping passes would still be safe, the locking read
// skipping the rows the other holds and CloseOrder's conditional update
// picking one winner per order.
//
// The reconciliation round (lost-reservation repair, stock-repair sync,
// Reconcile) is expensive and pointless twice: a sweeper runs it only while
// holding the advisory lock "reconcile" and only if no sweeper started one
// less than ReconcileInterval ago (a Redis key set with NX and that TTL).
// Its queries read every order and flow of every product, which costs the
// drain and the closes most exactly when they are busiest; so a round that
// falls due in the hot period of a sale — this sweeper's close passes closed
// more than hotCloses orders in the last hotWindow, an order waits for its
// close more than hotOverdue past its deadline, or some product has more
// than hotBacklog intake entries not yet written — waits until it ends, at
// most ReconcileDeferMax. The drift gauges are exported by the sweeper that
// ran the last round; the others drop theirs when they skip, so a stale
// drift never lingers.
type Sweeper struct {
	cfg   SweeperConfig
	store *persistence.Store
	log   *slog.Logger
	m     *Metrics
	// drifts: product → what the reconcile rounds know of its drift
	// (driftWatch; reconcile rounds only, one goroutine).
	drifts map[int64]*driftWatch
	// saleShown: the products whose sale series the last round exported
	// (reconcile rounds only, one goroutine).
	saleShown map[int64]bool
	// roundFails logs failed reconcile rounds (reconcileLoop's goroutine;
	// nil for rounds run directly).
	roundFails *FailureLog
	// recent counts the orders the close passes closed lately (hot).
	recent closeWindow
	// statusq hands closed orders to statusLoop (set by Run when Redis is).
	statusq chan []persistence.Order
}

// Advisory lock names (persistence.Store.TryLock scopes them per database).
const (
	sweepLockClose     = "sweeper.close"
	sweepLockReconcile = "sweeper.reconcile"
)

// closeLockName is the advisory lock of part part of parts: "sweeper.close"
// when the due orders are one part, as before parts existed.
func closeLockName(part, parts int) string {
	if parts == 1 {
		return sweepLockClose
	}
	return fmt.Sprintf("%s.%d/%d", sweepLockClose, part, parts)
}

// NewSweeper returns a Sweeper; cfg is completed with defaults and validated.
func NewSweeper(store *persistence.Store, cfg SweeperConfig) (*Sweeper, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sweeper{cfg: cfg, store: store, log: cfg.Logger.With("component", "sweeper"), m: orNew(cfg.Metrics)}, nil
}

// Run runs one close loop per part (Workers), and reconciles every
// ReconcileInterval when Redis is set, until ctx is cancelled; it returns nil
// then.
func (s *Sweeper) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if s.cfg.Redis != nil && s.cfg.ReconcileInterval > 0 {
		wg.Go(func() { s.reconcileLoop(ctx) })
	}
	var statuses sync.WaitGroup
	if s.cfg.Redis != nil {
		s.statusq = make(chan []persistence.Order, 2*s.cfg.Workers)
		sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		defer func() { stop(); statuses.Wait() }()
		statuses.Go(func() { s.statusLoop(sctx) })
	}
	for part := range s.cfg.Workers {
		wg.Go(func() { s.closeLoop(ctx, part) })
	}
	wg.Wait()
	return nil
}

// closeLoop runs the close passes of one part until ctx is cancelled. A
// pass that filled its batch is followed by the next at once; one that
// closed fewer by the next when the earliest pay deadline falls due
// (untilNextDue); one skipped because another sweeper holds the part after
// Interval. Failed passes back off from Interval to ErrorBackoff; the first
// of a run of failures and the recovery are logged, the rest counted
// (stampede_loop_failures_total{loop="sweeper_close"}).
func (s *Sweeper) closeLoop(ctx context.Context, part int) {
	fails := NewFailureLog("sweeper_close", "sweeper: close pass", s.log.With("part", part), s.m, s.cfg.Interval, s.cfg.ErrorBackoff)
	for ctx.Err() == nil {
		closed, more, skipped, err := s.sweepPart(ctx, part)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			sleep(ctx, fails.Fail(err))
		case more:
			fails.OK()
		case skipped:
			sleep(ctx, s.cfg.Interval)
		default:
			fails.OK()
			sleep(ctx, s.untilNextDue(ctx, closed))
		}
	}
}

// closeGap is the shortest pause between two passes of a part that closed
// less than a batch: orders fall due in bursts (a writer batch shares one
// deadline), and a pass per burst costs its round trips for few orders.
func (s *Sweeper) closeGap() time.Duration { return max(s.cfg.Interval/20, 5*time.Millisecond) }

// untilNextDue is the pause before the next pass of a part whose pass closed
// fewer due orders than a batch: until the earliest pay deadline of any
// WAITING_PAY order (persistence.Store.NextDue, on the database clock),
// within closeGap…Interval. Before, the pause was Interval/5 after a pass
// that closed orders and Interval after one that found none, and an order
// falling due just after a pass waited that long for the next.
func (s *Sweeper) untilNextDue(ctx context.Context, closed int) time.Duration {
	d, ok, err := s.store.NextDue(ctx)
	switch {
	case err != nil && closed > 0:
		return s.cfg.Interval / 5
	case err != nil || !ok:
		return s.cfg.Interval
	}
	return min(max(d, s.closeGap()), s.cfg.Interval)
}

// Sweep runs one close pass over every part, one after another (see
// sweepPart). more reports that some pass may have left work due at once.
// Errors: the first pass that failed (the others still run).
func (s *Sweeper) Sweep(ctx context.Context) (more bool, err error) {
	for part := range s.cfg.Workers {
		_, m, _, perr := s.sweepPart(ctx, part)
		more = more || m
		if err == nil {
			err = perr
		}
	}
	return more, err
}

// sweepPart runs one close pass over part: under the part's close lock (see
// Sweeper), it closes one batch of due orders of the part, then (part 0
// only) purges SENT outbox rows past OutboxRetention (up to PurgeBatch). It
// returns the orders closed; more reports that the batch was full and at
// least one order was closed, or the purge was full, so more work may be due
// at once. When another sweeper holds the lock it returns skipped at once
// and counts a skipped pass. A close lost to another closer (the close
// consumer, a payment) is normal and not an error; it counts in
// stampede_sweeper_lost_closes_total.
//
// Errors: MySQL failed (taking the lock, reading the due orders, or every
// close of the batch).
func (s *Sweeper) sweepPart(ctx context.Context, part int) (closed int, more, skipped bool, err error) {
	lock, ok, err := s.store.TryLock(ctx, closeLockName(part, s.cfg.Workers))
	if err != nil {
		if ctx.Err() != nil { // stopping: not a failure
			return 0, false, false, nil
		}
		s.m.sweeperErrors.Inc()
		s.m.sweeperPasses.WithLabelValues("close", "error").Inc()
		return 0, false, false, fmt.Errorf("sweeper: %w", err)
	}
	if !ok {
		s.m.sweeperPasses.WithLabelValues("close", "skipped").Inc()
		return 0, false, true, nil
	}
	defer lock.Release()
	closed, more, err = s.sweepLocked(ctx, part)
	s.recent.add(time.Now(), closed)
	if err == nil && part == 0 && s.cfg.OutboxRetention > 0 {
		n, perr := s.store.PurgeSentOutbox(ctx, s.cfg.OutboxRetention, s.cfg.PurgeBatch)
		s.m.outboxPurged.Add(float64(n))
		if perr != nil && ctx.Err() == nil {
			s.log.Warn("sweeper: outbox purge failed", "err", perr)
		}
		more = more || n == int64(s.cfg.PurgeBatch)
	}
	result := "done"
	if err != nil {
		result = "error"
	}
	s.m.sweeperPasses.WithLabelValues("close", result).Inc()
	return closed, more, false, err
}

// sweepLocked closes one batch of due orders of part with one set-based
// transaction (persistence.Store.CloseDuePart). Should that transaction fail
// with an error MySQL answered (not an outage), the pass falls back to
// closing the due orders one at a time, so one bad row delays only itself.
func (s *Sweeper) sweepLocked(ctx context.Context, part int) (closed int, more bool, err error) {
	orders, err := s.store.CloseDuePart(ctx, s.cfg.BatchSize, part, s.cfg.Workers)
	if err == nil {
		if s.cfg.Redis != nil && len(orders) > 0 {
			s.cacheStatuses(ctx, orders) // replays answer CANCELLED (statuscache.go)
		}
		s.m.sweeperClosed.Add(float64(len(orders)))
		return len(orders), len(orders) == s.cfg.BatchSize, nil
	}
	if ctx.Err() != nil { // stopping: not a failure
		return 0, false, nil
	}
	if isOutage(err) {
		s.m.sweeperErrors.Inc()
		return 0, false, fmt.Errorf("sweeper: %w", err)
	}
	s.log.Warn("sweeper: batch close failed, closing the due orders one by one", "err", err)
	return s.sweepOneByOne(ctx)
}

// cacheStatuses records the closed orders' status in Redis for replays
// (CacheStatuses): handed to the status goroutine of Run, so the next pass
// does not wait for Redis; done here when no such goroutine runs (Sweep
// called directly) or its queue is full.
func (s *Sweeper) cacheStatuses(ctx context.Context, orders []persistence.Order) {
	if s.statusq != nil {
		select {
		case s.statusq <- orders:
			return
		default:
		}
	}
	_ = CacheStatuses(ctx, s.cfg.Redis, orders, s.log)
}

// statusLoop records the statuses queued by cacheStatuses until ctx ends,
// then those still queued (bounded by a few seconds).
func (s *Sweeper) statusLoop(ctx context.Context) {
	for {
		select {
		case orders := <-s.statusq:
			_ = CacheStatuses(ctx, s.cfg.Redis, orders, s.log)
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			for {
				select {
				case orders := <-s.statusq:
					_ = CacheStatuses(dctx, s.cfg.Redis, orders, s.log)
				default:
					return
				}
			}
		}
	}
}

// sweepOneByOne is the close pass one order per transaction, over every
// part (the rare fallback; a close of another part's order is still one
// conditional update, safe against that part's pass).
func (s *Sweeper) sweepOneByOne(ctx context.Context) (closed int, more bool, err error) {
	due, err := s.store.DueOrders(ctx, s.cfg.BatchSize)
	if err != nil {
		if ctx.Err() != nil { // stopping: not a failure
			return 0, false, nil
		}
		s.m.sweeperErrors.Inc()
		return 0, false, fmt.Errorf("sweeper: %w", err)
	}
	var firstErr error
	for _, no := range due {
		o, err := s.store.CloseOrder(ctx, persistence.CloseRequest{OrderNo: no, Reason: order.ReasonTimeout,
			From: []order.Status{order.WaitingPay}, Due: true})
		switch {
		case err == nil:
			if s.cfg.Redis != nil {
				_ = CacheStatus(ctx, s.cfg.Redis, o, s.log) // replays answer CANCELLED (statuscache.go)
			}
			closed++
			s.m.sweeperClosed.Inc()
		case errors.Is(err, persistence.ErrInvalidState), errors.Is(err, persistence.ErrNotDue), errors.Is(err, persistence.ErrNotFound):
			s.m.sweeperLost.Inc()
		case ctx.Err() != nil:
			return closed, false, nil
		default:
			s.m.sweeperErrors.Inc()
			if firstErr == nil {
				firstErr = err
			}
			s.log.Error("sweeper: close failed", "orderNo", no, "err", err)
		}
	}
	if firstErr != nil && closed == 0 {
		return 0, false, fmt.Errorf("sweeper: %w", firstErr)
	}
	return closed, len(due) == s.cfg.BatchSize && closed > 0, nil
}

// reconcileLoop runs a reconciliation round each ReconcileInterval (the
// first after one interval; one due in a sale's hot period waits for its end,
// awaitCool) unless another sweeper runs or ran it (see Sweeper), and
// exports the drift per product. A drift that nothing in flight explains
// (settledDrift) is repaired or escalated once (repairDrift), not logged
// every round.
func (s *Sweeper) reconcileLoop(ctx context.Context) {
	s.roundFails = NewFailureLog("sweeper_reconcile", "sweeper: reconcile round", s.log, s.m, s.cfg.ReconcileInterval, s.cfg.ReconcileInterval)
	for sleep(ctx, s.cfg.ReconcileInterval) {
		if !s.awaitCool(ctx) {
			return
		}
		s.ReconcileRound(ctx)
	}
}

// ReconcileRound runs one reconciliation round — every repair of Redis stock
// (RepairLost when LostGrace > 0, RepairTransfers, RepairAdjustments), then
// ReconcileOnce — if this sweeper gets the reconcile lock and no sweeper
// started a round less than ReconcileInterval ago. ran reports whether it
// did; failures are logged and counted, not returned. Requires Redis in the
// config.
func (s *Sweeper) ReconcileRound(ctx context.Context) (ran bool) {
	skip := func() bool {
		s.m.sweeperPasses.WithLabelValues("reconcile", "skipped").Inc()
		// The sweeper that runs the rounds exports the drift, the refund
		// queue and the sale series; a stale value here would outlive it.
		s.m.resetRound()
		s.saleShown = nil
		return false
	}
	fail := func(err error) bool {
		if ctx.Err() == nil {
			s.m.sweeperPasses.WithLabelValues("reconcile", "error").Inc()
			if s.roundFails != nil {
				s.roundFails.Fail(err) // logs the first of a run of failures
			} else {
				s.log.Warn("sweeper: reconcile round not started", "err", err)
			}
		}
		return false
	}
	lock, ok, err := s.store.TryLock(ctx, sweepLockReconcile)
	if err != nil {
		return fail(err)
	}
	if !ok {
		return skip()
	}
	defer lock.Release()
	mark := s.cfg.ReconcileInterval
	if mark <= 0 {
		mark = time.Second
	}
	fresh, err := s.cfg.Redis.SetNX(ctx, lua.ReconcileMarkKey, "1", mark*9/10).Result()
	if err != nil {
		return fail(err)
	}
	if !fresh {
		return skip()
	}
	if s.cfg.LostGrace > 0 {
		_, _ = s.RepairLost(ctx) // logged and counted inside
	}
	if n, err := RepairTransfers(ctx, s.cfg.Redis, s.store); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("sweeper: stock transfer repair failed", "err", err)
		}
	} else if n > 0 {
		s.log.Info("sweeper: completed stock transfers left half-done", "transfers", n)
	}
	if applied, err := RepairAdjustments(ctx, s.cfg.Redis, s.store); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("sweeper: stock repair sync failed", "err", err)
		}
	} else if len(applied) > 0 {
		s.log.Warn("sweeper: applied stock repairs missing in Redis", "repairNos", applied)
	}
	rep, err := s.ReconcileOnce(ctx)
	if err == nil {
		s.repairDrift(ctx, s.settledDrift(ctx, rep))
	}
	result := "done"
	if err != nil {
		result = "error"
	} else if s.roundFails != nil {
		s.roundFails.OK()
	}
	s.m.sweeperPasses.WithLabelValues("reconcile", result).Inc()
	return true
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
	s.m.lostReleased.Add(float64(len(rep.Released)))
	if err != nil && ctx.Err() == nil {
		s.log.Warn("sweeper: lost reservation repair failed", "err", err)
	}
	return rep, err
}

// driftWatch is what the reconcile rounds remember of a drifting product.
type driftWatch struct {
	// print is the product as the last round read it (printOf).
	print string
	// escalated is the drift last escalated (0: none): the product is not
	// scanned nor logged again until its drift changes.
	escalated int64
}

// printOf is what of p changes while its orders move: Redis available,
// MySQL stock, orders and units per status, intake backlog.
func printOf(p ProductAudit) string {
	sts := make([]string, 0, len(p.Orders))
	for st := range p.Orders {
		sts = append(sts, string(st))
	}
	slices.Sort(sts)
	var b strings.Builder
	fmt.Fprintf(&b, "%d %d/%d/%d %d", p.RedisAvailable, p.MySQL.Available, p.MySQL.Locked, p.MySQL.Sold, p.IntakeBacklog)
	for _, st := range sts {
		fmt.Fprintf(&b, " %s:%v", st, p.Orders[order.Status(st)])
	}
	return b.String()
}

// settledDrift returns the products of rep whose drift nothing in flight
// explains, and exports stampede_reconcile_drift_unexplained for every
// product. A drift is in flight — orders on their way that will close it —
// while the product has intake entries not yet written, a PROCESSING order
// or unpublished outbox rows, or while anything of it changed since the
// last round read it (a release on its way from the outbox to Redis, a
// reservation written between this round's reads of Redis and MySQL): only
// a product read twice, one round apart, with the same drift and nothing
// moved, has a drift to repair or escalate. A live sale is therefore never
// reported as drifting; its real drift is, once it is quiet.
func (s *Sweeper) settledDrift(ctx context.Context, rep Report) []ProductAudit {
	if s.drifts == nil {
		s.drifts = map[int64]*driftWatch{}
	}
	seen := map[int64]bool{}
	var settled []ProductAudit
	for _, p := range rep.Products {
		if p.Error != "" {
			continue
		}
		seen[p.ProductID] = true
		w := s.drifts[p.ProductID]
		if p.Drift == 0 {
			if w != nil && w.escalated != 0 {
				s.log.Info("sweeper: drift resolved", "productId", p.ProductID, "was", w.escalated)
			}
			delete(s.drifts, p.ProductID)
			s.m.setUnexplained(p.ProductID, 0)
			continue
		}
		print := printOf(p)
		quiet := w != nil && w.print == print && p.IntakeBacklog == 0 && p.byStatus[order.Processing].Orders == 0
		if quiet {
			pending, err := s.store.PendingOutboxFor(ctx, []int64{p.ProductID})
			quiet = err == nil && pending == 0
		}
		if w == nil {
			w = &driftWatch{}
			s.drifts[p.ProductID] = w
		}
		w.print = print
		if !quiet {
			s.m.setUnexplained(p.ProductID, 0)
			continue
		}
		s.m.setUnexplained(p.ProductID, p.Drift)
		settled = append(settled, p)
	}
	for pid := range s.drifts {
		if !seen[pid] {
			delete(s.drifts, pid)
		}
	}
	return settled
}

// repairDrift repairs or escalates the settled drift of products, once per
// drift: RepairLostWrites first (the writes Redis lost); a product it
// repaired something of is judged again by the next rounds; one it found
// nothing to repair in is escalated — logged at error once, counted in
// stampede_reconcile_drift_escalations_total — and left alone until its
// drift changes. The escalation names the live orders whose units Redis gave
// back (a release marker on an order MySQL holds): those are not repaired
// automatically.
func (s *Sweeper) repairDrift(ctx context.Context, products []ProductAudit) {
	var pids []int64
	var todo []ProductAudit
	for _, p := range products {
		if s.drifts[p.ProductID].escalated == p.Drift {
			continue // escalated at this drift: nothing new
		}
		pids = append(pids, p.ProductID)
		todo = append(todo, p)
	}
	if len(pids) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.ReconcileTimeout)
	defer cancel()
	lw, err := RepairLostWrites(rctx, s.cfg.Redis, s.store, pids, LostWritesConfig{RequestTTL: s.cfg.RequestTTL})
	s.m.repairs.WithLabelValues("restored").Add(float64(len(lw.Restored)))
	s.m.repairs.WithLabelValues("released").Add(float64(len(lw.Released)))
	if len(lw.Restored)+len(lw.Released) > 0 {
		s.log.Warn("sweeper: repaired writes Redis lost", "products", pids, "examined", lw.Examined,
			"restored", len(lw.Restored), "released", len(lw.Released), "orderNos", append(lw.Restored, lw.Released...))
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("sweeper: lost write repair failed", "err", err)
		}
		return
	}
	for _, p := range todo {
		s.drifts[p.ProductID].escalated = p.Drift
		s.m.driftEscalations.Inc()
		s.log.Error("sweeper: drift with no order in flight that no repair explains; escalated once (logged again only if it changes)",
			"productId", p.ProductID, "drift", p.Drift, "redisAvailable", p.RedisAvailable, "total", p.Total, "adjust", p.Adjust,
			"mysql", p.MySQL, "examined", lw.Examined, "liveOrdersReleasedInRedis", len(lw.LiveReleased[p.ProductID]),
			"examples", lw.LiveReleased[p.ProductID][:min(len(lw.LiveReleased[p.ProductID]), 10)])
	}
}

// ReconcileOnce runs one reconciliation, exports its drift, the sale series
// of the active sales (exportSales) and the refund queue's gauges, and
// returns its report.
func (s *Sweeper) ReconcileOnce(ctx context.Context) (Report, error) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.ReconcileTimeout)
	defer cancel()
	rep, err := Reconcile(rctx, s.cfg.Redis, s.store, nil)
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
		if p.Error != "" {
			// Its drift is unknown: keep the last exported value.
			s.log.Error("sweeper: product could not be reconciled: its Redis data is unusable", "productId", p.ProductID, "err", p.Error)
			continue
		}
		s.m.setDrift(p.ProductID, p.Drift, p.IntakeBacklog)
	}
	s.exportSales(rep, time.Now())
	if pending, oldest, err := s.store.RefundBacklog(rctx); err != nil {
		// The last exported values stay: the queue changes only by refunds.
		if ctx.Err() == nil {
			s.log.Warn("sweeper: refund backlog not read", "err", err)
		}
	} else {
		s.m.setRefunds(pending, oldest)
	}
	return rep, nil
}

// activeSales picks the products of rep whose sale series are exported: sale
// started at now and not ended more than SaleActiveAfterEnd before it,
// readable (no audit error), the newest MaxSaleSeries by id.
func activeSales(rep Report, now time.Time) []ProductAudit {
	var out []ProductAudit
	for _, p := range rep.Products {
		if p.Error == "" && !p.saleStart.After(now) && p.saleEnd.After(now.Add(-SaleActiveAfterEnd)) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b ProductAudit) int { return cmp.Compare(b.ProductID, a.ProductID) })
	return out[:min(len(out), MaxSaleSeries)]
}

// exportSales sets the sale series of the active sales of rep (units:
// Redis available, MySQL locked and sold; orders per status), all read by
// the reconciliation already, and deletes the series of the products that
// left the set since the last round. A product the round could not read
// keeps its last values, like its drift.
func (s *Sweeper) exportSales(rep Report, now time.Time) {
	shown := map[int64]bool{}
	for _, p := range rep.Products {
		if p.Error != "" && s.saleShown[p.ProductID] {
			shown[p.ProductID] = true
		}
	}
	for _, p := range activeSales(rep, now) {
		orders := make(map[order.Status]int64, len(p.byStatus))
		for st, c := range p.byStatus {
			orders[st] = c.Orders
		}
		s.m.setSale(p.ProductID, p.RedisAvailable, p.MySQL.Locked, p.MySQL.Sold, orders)
		shown[p.ProductID] = true
	}
	for id := range s.saleShown {
		if !shown[id] {
			s.m.dropSale(id)
		}
	}
	s.saleShown = shown
}
