package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/drop"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/metric"
	"github.com/stampede-sh/stampede/persistence"
)

// The admission pacer lets buyers out of each product's waiting room
// (lua/waitingroom.go) at the rate the pipeline can finish orders. Every
// Interval it runs one lua.Admit step per room that is on: the step expires
// admissions past their window (their places pass to the next in line) and
// admits the next tickets, as many as rate × the time since the previous
// step of any pacer, and never more than the units not yet spoken for by a
// live admission. The time is kept in Redis and the step is one script,
// so any number of pacers (one per sweeper process) together never admit
// faster than the rate asked for, and never faster than Ceiling or the
// room's own ceiling. Nobody is admitted while the sale is paused.
//
// At the opening the first step asks for the pre-queue's shuffle: the pacer
// reads the room's seed from MySQL (product_drop), computes the shuffle
// (package drop) and publishes it (lua.ShuffleRoom); admission starts once
// it is published. In a random room it gives every step's new tickets their
// keys (lua.FreshKeys). For a sharded product it passes the units left in
// every shard (lua.UnitsLeft) to each step.
//
// The rate is PacerConfig.Rate when set. Otherwise (auto) the pacer keeps
// the orders on their way through the pipeline at TargetBacklog seconds of
// drain with window flow control (levelControl, pacer_level.go): the
// backlog it aims for is a number of orders, T = TargetBacklog × the drain
// measured over the last three seconds, and each step admits the gap
// between T and the orders pending (backlog + live admissions, measured
// every MeasureEvery, plus its own admissions since): a place is given
// again once an order was seen leaving.

// PacerConfig configures a Pacer.
type PacerConfig struct {
	// Rate fixes the admission rate, buyers per second. 0 (default): auto,
	// from the measured drain.
	Rate float64
	// Ceiling is the highest rate ever asked for, buyers per second.
	// Default 2000.
	Ceiling float64
	// MinRate is the lowest rate auto mode goes down to. Default 5.
	MinRate float64
	// StartRate is auto mode's first rate. Default 50.
	StartRate float64
	// TargetBacklog is the backlog auto mode aims for, in seconds of drain.
	// Default 2s.
	TargetBacklog time.Duration
	// Interval is the period of admission steps. Default 100ms.
	Interval time.Duration
	// MeasureEvery is the period of backlog measurements (auto). Default 250ms.
	MeasureEvery time.Duration
	// Overbook is how many live admissions a fifo or random room may hold
	// beyond its units left (lua.AdmitArgs.Overbook). Default 0: none.
	Overbook int
	// Window is the admission window of rooms turned on without one. Default 2m.
	Window time.Duration
	// ListEvery is how often the product list is re-read. Default 2s.
	ListEvery time.Duration
	// Group is the writers' consumer group. Default "writers".
	Group string
	// Metrics receives the room series; nil: private collectors.
	Metrics *RoomMetrics
	// Failures receives stampede_loop_failures_total (pacer_list,
	// pacer_step); nil: private.
	Failures *Metrics
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c *PacerConfig) setDefaults() {
	c.Ceiling = cmp.Or(c.Ceiling, 2000)
	c.MinRate = cmp.Or(c.MinRate, 5)
	c.StartRate = cmp.Or(c.StartRate, 50)
	c.TargetBacklog = cmp.Or(c.TargetBacklog, 2*time.Second)
	c.Interval = cmp.Or(c.Interval, 100*time.Millisecond)
	c.MeasureEvery = cmp.Or(c.MeasureEvery, 250*time.Millisecond)
	c.Window = cmp.Or(c.Window, 2*time.Minute)
	c.ListEvery = cmp.Or(c.ListEvery, 2*time.Second)
	c.Group = cmp.Or(c.Group, "writers")
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = NewRoomMetrics(nil)
	}
}

// Validate reports a configuration that cannot work.
func (c PacerConfig) Validate() error {
	switch {
	case c.Rate < 0 || c.Ceiling < 0 || c.MinRate < 0 || c.StartRate < 0:
		return errors.New("invalid config: pacer rates must not be negative")
	case c.Rate > c.Ceiling && c.Ceiling > 0:
		return errors.New("invalid config: pacer rate above its ceiling")
	case c.MinRate > c.Ceiling:
		return errors.New("invalid config: pacer min rate above its ceiling")
	case c.Overbook < 0:
		return errors.New("invalid config: pacer overbook must not be negative")
	}
	return nil
}

// Pacer runs admission steps for every product whose waiting room is on.
type Pacer struct {
	cfg   PacerConfig
	store *persistence.Store
	rdb   redis.UniversalClient
	log   *slog.Logger
	m     *RoomMetrics

	mu    sync.Mutex
	rooms map[int64]*roomControl // auto-mode state per product
}

// roomControl is one room's state in this pacer: its auto rate and last
// measurement, and what it learned of the room.
type roomControl struct {
	level  levelControl // auto mode's controller
	rate   float64      // the rate of the last step (auto: as levelControl asked)
	mode   lua.RoomMode
	shards int
	seed   *drop.Seed // read from MySQL when first needed (shuffle, random keys)
}

// NewPacer returns a pacer over store (PROCESSING counts, product list) and rdb.
func NewPacer(store *persistence.Store, rdb redis.UniversalClient, cfg PacerConfig) (*Pacer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || rdb == nil {
		return nil, errors.New("invalid config: pacer needs a store and a Redis client")
	}
	return &Pacer{cfg: cfg, store: store, rdb: rdb, log: cfg.Logger.With("component", "pacer"), m: cfg.Metrics,
		rooms: make(map[int64]*roomControl)}, nil
}

// Run steps every Interval until ctx ends. A product listing that fails
// (MySQL down) keeps the last list and is tried again with backoff (from
// ListEvery up to 30s); a round of steps that fails (Redis down) pauses the
// steps with backoff (from Interval up to 10s). Each logs when it starts
// failing and when it recovers, and counts every failure
// (stampede_loop_failures_total{loop="pacer_list"|"pacer_step"}).
func (p *Pacer) Run(ctx context.Context) error {
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	var products []persistence.Product
	var measured, nextList, nextStep time.Time
	lists := NewFailureLog("pacer_list", "pacer: list products", p.log, p.cfg.Failures, p.cfg.ListEvery, 30*time.Second)
	steps := NewFailureLog("pacer_step", "pacer: admission step", p.log, p.cfg.Failures, p.cfg.Interval, 10*time.Second)
	off := map[int64]bool{} // rooms found off since the last listing: not stepped again until the next
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if now := time.Now(); !now.Before(nextList) {
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			ps, err := p.store.ListProducts(lctx)
			cancel()
			switch {
			case err == nil:
				products, nextList = ps, now.Add(p.cfg.ListEvery)
				clear(off)
				lists.OK()
			case ctx.Err() == nil:
				nextList = now.Add(lists.Fail(err))
			}
		}
		if time.Now().Before(nextStep) {
			continue
		}
		measure := time.Since(measured) >= p.cfg.MeasureEvery
		if measure {
			measured = time.Now()
		}
		now := time.Now()
		for _, pr := range products {
			// Nobody is admitted after the sale; before the opening the
			// script answers AdmitNotOpen itself (the listing's saleStart may
			// be ListEvery old: an opening moved forward must not wait for it).
			if off[pr.ID] || !now.Before(pr.SaleEnd) {
				continue
			}
			on, err := p.StepProduct(ctx, pr.ID, pr.Shards, measure)
			if errors.Is(err, lua.ErrStockCorrupt) || errors.Is(err, errRoomSeed) { // this product's data, not Redis: step the others
				if !off[pr.ID] {
					p.log.Error("pacer: product's room data unusable; skipped until the next listing", "productId", pr.ID, "err", err)
					off[pr.ID] = true
				}
				continue
			}
			if err != nil {
				if ctx.Err() == nil {
					nextStep = time.Now().Add(steps.Fail(fmt.Errorf("product %d: %w", pr.ID, err)))
				}
				break // the next products would fail the same way: Redis is the common dependency
			}
			steps.OK()
			if !on {
				off[pr.ID] = true
			}
		}
	}
}

// Step is StepProduct for a one-shard product.
func (p *Pacer) Step(ctx context.Context, productID int64, measure bool) (on bool, err error) {
	return p.StepProduct(ctx, productID, 1, measure)
}

// StepProduct runs one admission step for productID (with shards stock
// shards) and tells whether its room is on. A step that finds the opening
// passed and the pre-queue not shuffled shuffles it and steps again. With
// measure set and the room on it then reads the room's counters for the
// gauges and, in auto mode, measures the backlog for the next step's rate.
// A room that is off costs one script call reading one field (Run then
// skips it until its next product listing).
func (p *Pacer) StepProduct(ctx context.Context, productID int64, shards int, measure bool) (on bool, err error) {
	rate := p.cfg.Rate
	rc := p.control(productID)
	p.mu.Lock()
	rc.shards = max(shards, 1)
	p.mu.Unlock()
	maxN := maxStep
	if rate == 0 {
		rate, maxN = p.autoRate(productID, time.Now())
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	args := lua.AdmitArgs{Rate: rate, Max: maxN, MaxElapsed: max(p.cfg.Interval*5, time.Second), Window: p.cfg.Window, Left: -1,
		Overbook: int64(p.cfg.Overbook)}
	if shards > 1 {
		if args.Left, err = lua.UnitsLeft(sctx, p.rdb, productID, shards); err != nil {
			return true, err
		}
	}
	if rc.mode == lua.ModeRandom {
		if args.Keys, err = p.freshKeys(sctx, productID, rc); err != nil {
			return true, err
		}
	}
	res, err := lua.Admit(sctx, p.rdb, productID, args)
	if err == nil && res.Code == lua.AdmitShuffle {
		if err = p.shuffle(sctx, productID, args.Left); err == nil {
			res, err = lua.Admit(sctx, p.rdb, productID, args)
		}
	}
	if err != nil {
		return false, err
	}
	if !res.On {
		p.mu.Lock()
		delete(p.rooms, productID)
		p.mu.Unlock()
		return false, nil
	}
	p.m.record(productID, res, time.Now())
	if p.cfg.Rate == 0 {
		p.mu.Lock()
		rc.level.admitted(len(res.Admitted), res.Waiting > 0)
		p.mu.Unlock()
	}
	if measure || rc.mode == "" {
		st, err := lua.ReadRoom(sctx, p.rdb, productID)
		if err != nil {
			return true, err
		}
		p.mu.Lock()
		rc.mode = st.Mode
		p.mu.Unlock()
		if p.cfg.Rate == 0 && res.Code == lua.AdmitStepped {
			p.measure(sctx, productID, st.Live)
		}
		p.m.status(productID, st)
	}
	return true, nil
}

// control returns productID's state in this pacer, created on first use.
func (p *Pacer) control(productID int64) *roomControl {
	p.mu.Lock()
	defer p.mu.Unlock()
	rc := p.rooms[productID]
	if rc == nil {
		rc = &roomControl{rate: min(p.cfg.StartRate, p.cfg.Ceiling), level: newLevelControl(p.cfg)}
		p.rooms[productID] = rc
	}
	return rc
}

// roomSeed reads productID's shuffle seed from MySQL once.
func (p *Pacer) roomSeed(ctx context.Context, productID int64, rc *roomControl) (drop.Seed, error) {
	p.mu.Lock()
	if rc.seed != nil {
		s := *rc.seed
		p.mu.Unlock()
		return s, nil
	}
	p.mu.Unlock()
	t, err := p.store.Room(ctx, productID)
	if errors.Is(err, persistence.ErrNotFound) {
		// A room turned on before its terms were stored (issue 17): it gets
		// a seed now, published at its shuffle with its commitment.
		t, err = p.newSeed(ctx, productID)
	}
	if err != nil {
		return drop.Seed{}, fmt.Errorf("%w: product %d: %w", errRoomSeed, productID, err)
	}
	seed, err := drop.ParseSeed(t.Seed)
	if err != nil {
		return drop.Seed{}, fmt.Errorf("%w: product %d: %w", errRoomSeed, productID, err)
	}
	if seed.Commitment() != t.Commitment {
		return drop.Seed{}, fmt.Errorf("%w: product %d: %w", errRoomSeed, productID, drop.ErrSeedMismatch)
	}
	p.mu.Lock()
	rc.seed = &seed
	p.mu.Unlock()
	return seed, nil
}

// errRoomSeed: a room's seed cannot be read or does not match its
// commitment; that room is skipped until the next listing, the others go on.
var errRoomSeed = errors.New("pacer: room seed unusable")

// newSeed stores a seed for a room that has none (SaveRoom keeps one stored
// meanwhile by another pacer or an admin) and returns the stored terms.
func (p *Pacer) newSeed(ctx context.Context, productID int64) (persistence.RoomTerms, error) {
	seed, err := drop.NewSeed()
	if err != nil {
		return persistence.RoomTerms{}, err
	}
	st, err := lua.ReadRoom(ctx, p.rdb, productID)
	if err != nil {
		return persistence.RoomTerms{}, err
	}
	p.log.Warn("pacer: room without stored terms: a seed is drawn at its opening", "productId", productID)
	return p.store.SaveRoom(ctx, 0, persistence.RoomTerms{ProductID: productID, On: st.On, Mode: string(st.Mode),
		PreQueue: st.PreQueue, Reserve: st.Reserve, PowCost: st.PowCost, Ceiling: int64(st.Ceiling),
		Window: max(st.Window, time.Second), Seed: seed.Hex(), Commitment: seed.Commitment()})
}

// shards is productID's number of stock shards as its last step knew it.
func (p *Pacer) shards(productID int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rc := p.rooms[productID]; rc != nil {
		return max(rc.shards, 1)
	}
	return 1
}

// shuffle publishes productID's pre-queue shuffle (any pacer may; one wins).
func (p *Pacer) shuffle(ctx context.Context, productID, left int64) error {
	rc := p.control(productID)
	seed, err := p.roomSeed(ctx, productID, rc)
	if err != nil {
		return err
	}
	st, err := lua.ReadRoom(ctx, p.rdb, productID)
	if err != nil {
		return err
	}
	if st.Commitment != "" && st.Commitment != seed.Commitment() {
		return fmt.Errorf("pacer: product %d: the room's published commitment is not its seed's: %w", productID, drop.ErrSeedMismatch)
	}
	start := time.Now()
	published, err := lua.ShuffleRoom(ctx, p.rdb, productID, st.Mode, seed, left)
	if err != nil {
		return err
	}
	if published {
		p.log.Info("pacer: pre-queue shuffled and published", "productId", productID, "mode", st.Mode,
			"tickets", st.PreQueued, "took", time.Since(start).Round(time.Millisecond))
	}
	p.mu.Lock()
	rc.mode = st.Mode
	p.mu.Unlock()
	return nil
}

// freshKeys keys a random room's new tickets.
func (p *Pacer) freshKeys(ctx context.Context, productID int64, rc *roomControl) ([]lua.KeyedUser, error) {
	seed, err := p.roomSeed(ctx, productID, rc)
	if err != nil {
		return nil, err
	}
	return lua.FreshKeys(ctx, p.rdb, productID, seed)
}

// Rate is the auto rate this pacer asks for productID (0 before its first
// step), for tests and logs.
func (p *Pacer) Rate(productID int64) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rc := p.rooms[productID]; rc != nil {
		return rc.rate
	}
	return 0
}

// maxStep bounds the admissions of one step (room_admit.lua's ARGV[2]):
// one script call blocks Redis while it writes each admission.
const maxStep = 2000

// autoRate is the rate and the most admissions auto mode asks of
// productID's next step (levelControl.ask; a draw: maxStep).
func (p *Pacer) autoRate(productID int64, now time.Time) (float64, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rc := p.rooms[productID]
	rate, n := rc.level.ask(now, p.cfg)
	rc.rate = rate
	if rc.mode == lua.ModeDraw {
		// A draw offers its units at once (room_admit.lua ignores the rate):
		// the window's gap does not pace its winners (it did: 5,000 winners
		// took 13 s to be admitted after a shuffle published in 0.8 s).
		n = maxStep
	}
	return rate, n
}

// measure reads productID's backlog and hands it to its controller; live
// is the room's admissions not yet used.
func (p *Pacer) measure(ctx context.Context, productID, live int64) {
	backlog, accepted, err := p.backlog(ctx, productID)
	if err != nil {
		return // keep the last estimate; the next measurement tries again
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	rc := p.rooms[productID]
	if rc == nil {
		return
	}
	rc.level.measured(now, backlog, live, accepted, p.cfg)
	p.m.control(productID, float64(backlog), rc.level.pending, rc.level.drain, rc.level.target)
}

// backlog reads productID's orders not yet past PROCESSING and the count of
// orders ever accepted into its intake streams (every shard's).
func (p *Pacer) backlog(ctx context.Context, productID int64) (backlog, accepted int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	shards := p.shards(productID)
	for sh := range shards {
		stream := lua.ShardKeys(productID, sh).Intake()
		pipe := p.rdb.Pipeline()
		info := pipe.XInfoStream(ctx, stream)
		groups := pipe.XInfoGroups(ctx, stream)
		if _, err := pipe.Exec(ctx); err != nil {
			if errors.Is(err, redis.Nil) || redis.HasErrorPrefix(err, "ERR no such key") {
				continue // nothing accepted yet
			}
			return 0, 0, err
		}
		accepted += info.Val().EntriesAdded
		for _, g := range groups.Val() {
			if g.Name == p.cfg.Group {
				backlog += g.Pending + max(g.Lag, 0)
			}
		}
	}
	processing, err := p.store.CountProcessing(ctx, productID)
	if err != nil {
		return 0, 0, err
	}
	return backlog + processing, accepted, nil
}

// RoomMetrics are the waiting-room series. Series (stampede_ prefix):
//
//	room_tickets_issued{product}        tickets given so far (read from Redis every MeasureEvery)
//	room_admitted{product}              admissions made so far
//	room_expired{product}               admissions that expired unused (their places passed on)
//	room_waiting{product}               tickets not yet admitted
//	room_admitted_live{product}         admissions neither used by an order nor expired
//	room_admission_rate{product}        rate applied by the last step, buyers per second
//	room_backlog_orders{product}        auto mode: the last measured backlog
//	room_drain_rate{product}            auto mode: the drain, orders that left PROCESSING per second over the last 3 s
//	room_target_backlog_orders{product} auto mode: the backlog aimed at, TargetBacklog × drain
//	room_pending_orders{product}        auto mode: what the controller counts against the target
//	                                    at the last measurement (the backlog plus the live
//	                                    admissions above their mean of the last 3 s)
//	room_wait_seconds                   histogram: time in line of each admitted buyer
//	room_admissions_total               buyers admitted by this process's pacer steps
//
// The gauges read from Redis are the same on every pacer (aggregate with max).
type RoomMetrics struct {
	issued, admitted, expired, waiting, live, rate, backlog, drain, target, pending *prometheus.GaugeVec
	wait                                                                            prometheus.Histogram
	admissions                                                                      prometheus.Counter
}

// NewRoomMetrics creates the room series and registers them with reg (nil: unregistered).
func NewRoomMetrics(reg prometheus.Registerer) *RoomMetrics {
	g := func(name, help string) *prometheus.GaugeVec {
		return metric.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "stampede_room_" + name, Help: help}, []string{"product"}))
	}
	return &RoomMetrics{
		issued:   g("tickets_issued", "Waiting-room tickets given so far, at the pacer's last step."),
		admitted: g("admitted", "Waiting-room admissions made so far, at the pacer's last step."),
		expired:  g("expired", "Waiting-room admissions that expired unused (their places passed on)."),
		waiting:  g("waiting", "Waiting-room tickets not yet admitted."),
		live:     g("admitted_live", "Waiting-room admissions neither used by an order nor expired yet."),
		rate:     g("admission_rate", "Admission rate applied by the pacer's last step, buyers per second."),
		backlog:  g("backlog_orders", "Auto pacer: the product's orders accepted and not yet past PROCESSING, at the last measurement."),
		drain:    g("drain_rate", "Auto pacer: drain of the product's pipeline, orders that left PROCESSING per second over the last 3 s."),
		target:   g("target_backlog_orders", "Auto pacer: the backlog aimed at, TargetBacklog seconds of the drain."),
		pending:  g("pending_orders", "Auto pacer: what it counts against the target at the last measurement, the backlog plus the live admissions above their mean of the last 3 s."),
		wait: metric.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "stampede_room_wait_seconds", Help: "Time in line of each admitted buyer, ticket to admission.",
			Buckets: []float64{.1, .25, .5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800},
		})),
		admissions: metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stampede_room_admissions_total", Help: "Buyers admitted by this process's pacer steps.",
		})),
	}
}

func (m *RoomMetrics) record(productID int64, res lua.AdmitResult, now time.Time) {
	l := strconv.FormatInt(productID, 10)
	m.rate.WithLabelValues(l).Set(res.Rate)
	m.admissions.Add(float64(len(res.Admitted)))
	for _, a := range res.Admitted {
		if !a.IssuedAt.IsZero() {
			m.wait.Observe(max(now.Sub(a.IssuedAt).Seconds(), 0))
		}
	}
}

func (m *RoomMetrics) status(productID int64, st lua.RoomStatus) {
	l := strconv.FormatInt(productID, 10)
	m.issued.WithLabelValues(l).Set(float64(st.Issued))
	m.admitted.WithLabelValues(l).Set(float64(st.Admitted))
	m.expired.WithLabelValues(l).Set(float64(st.Expired))
	m.waiting.WithLabelValues(l).Set(float64(st.Waiting()))
	m.live.WithLabelValues(l).Set(float64(st.Live))
}

func (m *RoomMetrics) control(productID int64, backlog, pending, drain, target float64) {
	l := strconv.FormatInt(productID, 10)
	m.backlog.WithLabelValues(l).Set(backlog)
	m.pending.WithLabelValues(l).Set(pending)
	m.drain.WithLabelValues(l).Set(drain)
	m.target.WithLabelValues(l).Set(target)
}
