package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/persistence"
)

// RelayConfig configures a Relay. Zero fields take the documented default.
type RelayConfig struct {
	// Owner is written to mq_outbox.lease_owner for the rows this relay
	// claims (at most 64 bytes). Default "<hostname>-<pid>-<random>".
	Owner string
	// BatchSize is the most rows claimed and published at once. Default 500.
	BatchSize int
	// PollInterval is the pause after a claim that found fewer than
	// BatchSize rows. Default 50ms.
	PollInterval time.Duration
	// Lease is how long claimed rows stay SENDING before any relay may claim
	// them again (the claimer is then presumed dead). It must exceed
	// ConfirmTimeout comfortably. Default 30s.
	Lease time.Duration
	// ConfirmTimeout bounds publishing one batch and waiting for all its
	// publisher confirms; unconfirmed rows go RETRY. Default 5s.
	ConfirmTimeout time.Duration
	// MaxRetries is the retry budget of a row: the failed publish that makes
	// retry_count reach it marks the row DEAD. Default 20.
	MaxRetries int
	// RetryBackoff is the delay before a failed row is due again; it doubles
	// with each failure of that row, up to MaxRetryBackoff. Defaults 1s and 1m.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// ErrorBackoff bounds the pause after a failed claim (MySQL down); it
	// doubles from PollInterval up to this. Default 5s.
	ErrorBackoff time.Duration
	// Logger receives warnings and errors. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the relay's series. Default: private, unregistered.
	Metrics *Metrics
}

func (c *RelayConfig) setDefaults() {
	c.Owner = cmp.Or(c.Owner, instanceName())
	if len(c.Owner) > 64 {
		c.Owner = c.Owner[:64]
	}
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.PollInterval = cmp.Or(c.PollInterval, 50*time.Millisecond)
	c.Lease = cmp.Or(c.Lease, 30*time.Second)
	c.ConfirmTimeout = cmp.Or(c.ConfirmTimeout, 5*time.Second)
	c.MaxRetries = cmp.Or(c.MaxRetries, 20)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, time.Second)
	c.MaxRetryBackoff = cmp.Or(c.MaxRetryBackoff, time.Minute)
	c.ErrorBackoff = cmp.Or(c.ErrorBackoff, 5*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field.
func (c *RelayConfig) Validate() error {
	switch {
	case c.Owner == "":
		return errors.New("invalid config: relay owner must be set")
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return fmt.Errorf("invalid config: relay batch size %d not in 1…10000", c.BatchSize)
	case c.PollInterval <= 0 || c.ConfirmTimeout <= 0 || c.ErrorBackoff <= 0:
		return errors.New("invalid config: relay durations must be positive")
	case c.Lease < 2*c.ConfirmTimeout:
		return fmt.Errorf("invalid config: relay lease %v must be at least twice the confirm timeout %v", c.Lease, c.ConfirmTimeout)
	case c.MaxRetries < 1:
		return fmt.Errorf("invalid config: relay max retries %d", c.MaxRetries)
	case c.RetryBackoff <= 0 || c.MaxRetryBackoff < c.RetryBackoff:
		return fmt.Errorf("invalid config: relay retry backoff %v…%v", c.RetryBackoff, c.MaxRetryBackoff)
	}
	return nil
}

// Relay publishes the transactional outbox to RabbitMQ (docs/spec.md §1 "relay").
//
// Each round it claims due rows with persistence.Store.ClaimOutbox (FOR
// UPDATE SKIP LOCKED plus a lease, so any number of relays share the work),
// publishes all of them on a confirm-mode channel without waiting in between,
// then waits for every confirm of the batch. Rows the broker acked are marked
// SENT in one statement; rows that were nacked, returned (mandatory publish
// with no queue bound), unconfirmed within ConfirmTimeout or lost with the
// channel are marked RETRY with a per-row exponential backoff, and DEAD once
// their retry budget is spent. Nothing is marked SENT before its confirm.
//
// Messages are persistent, carry MessageId = event_id (consumers deduplicate
// on it), Type = event_type and, for delayed rows, Expiration = the
// milliseconds left until the row's delay ends. Delivery is at least once: a
// relay that dies after the confirm and before SENT leaves its rows SENDING,
// and they are published again when the lease ends.
type Relay struct {
	cfg   RelayConfig
	store *persistence.Store
	conn  *Conn
	log   *slog.Logger
	m     *Metrics

	mysql    *breaker // around ClaimOutbox
	health   *BrokerHealth
	pubFails *FailureLog // batches with failed publishes (settle, Run's goroutine)

	// TestSignals are set by tests only, before Run (testsignals.go).
	TestSignals RelayTestSignals
}

// NewRelay returns a Relay publishing through conn; cfg is completed with
// defaults and validated. conn should not be shared with consumers.
func NewRelay(store *persistence.Store, conn *Conn, cfg RelayConfig) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "relay", "owner", cfg.Owner)
	m := orNew(cfg.Metrics)
	return &Relay{cfg: cfg, store: store, conn: conn, log: log, mysql: newBreaker("relay-mysql", log),
		m: m, health: conn.Health(),
		pubFails: NewFailureLog("relay_publish", "relay: publishing outbox rows (the failed ones go RETRY)", log, m, time.Second, time.Second)}, nil
}

// pubChannel is a confirm-mode channel with its return and close listeners.
type pubChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	dropped bool // given up (dropChannel); its close may still be on its way
}

func (p *pubChannel) broken() bool {
	if p.dropped || p.ch.IsClosed() {
		return true
	}
	select {
	case <-p.closes: //nolint:errcheck // any close, whatever its error, means the channel is gone
		return true
	default:
		return false
	}
}

// Run relays until ctx is cancelled. A batch already claimed is always
// finished (published, confirmed, marked) before Run returns, so a graceful
// stop leaves no row SENDING. While the broker blocks publishers (a memory
// or disk alarm: connection.blocked on any connection of the process's
// BrokerHealth) it claims nothing and opens no channel; it resumes when the
// broker unblocks. It returns nil after a cancelled ctx, the error of
// TestSignals.AfterConfirm, or ErrConnClosed (wrapped) if its Conn was closed.
func (r *Relay) Run(ctx context.Context) error {
	var pc *pubChannel
	defer func() {
		if pc != nil && !pc.dropped {
			closeChannel(pc.ch, closeWait)
		}
	}()
	errBo := newBackoff(r.cfg.PollInterval, r.cfg.ErrorBackoff)
	claims := NewFailureLog("relay_claim", "relay: claim outbox", r.log, r.m, r.cfg.PollInterval, r.cfg.ErrorBackoff)
	opened := 0
	var accepted atomic.Int64 // when the broker last confirmed a publish of this loop (Unix ns)
	var probing sync.WaitGroup
	pctx, stopProbing := context.WithCancel(ctx)
	probing.Go(func() { r.probeLoop(pctx, &accepted) })
	defer probing.Wait()
	defer stopProbing()
	for ctx.Err() == nil {
		if !r.waitUnblocked(ctx) {
			return nil
		}
		if pc == nil || pc.broken() {
			if pc != nil && !pc.dropped {
				closeChannel(pc.ch, closeWait)
			}
			pc = nil
			var err error
			if pc, err = r.open(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(err, ErrConnClosed) {
					return fmt.Errorf("relay: %w", err)
				}
				r.log.Warn("relay: open channel failed", "err", err)
				sleep(ctx, errBo.next())
				continue
			}
			if opened++; opened > 1 {
				r.m.relayReopens.Inc()
			}
		}
		// Claim only after the broker accepted a publish lately: an alarm
		// raised while this relay was idle is learnt from a probe, before
		// rows are claimed into it (see probe).
		if sinceConfirm(&accepted) > probeAfter {
			if !r.probe(ctx, pc) {
				continue
			}
			accepted.Store(time.Now().UnixNano())
		}
		// Claim only with a working channel: while the broker is away, rows
		// stay NEW instead of burning their retry budget.
		var rows []persistence.OutboxRow
		err := guard(r.mysql, func() (err error) {
			rows, err = r.store.ClaimOutbox(ctx, r.cfg.Owner, r.cfg.BatchSize, r.cfg.Lease)
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			sleep(ctx, claims.Fail(err))
			continue
		}
		claims.OK()
		errBo.reset()
		if len(rows) == 0 {
			sleep(ctx, r.cfg.PollInterval)
			continue
		}
		r.m.relayClaimed.Add(float64(len(rows)))
		acked, err := r.relay(ctx, pc, rows)
		if err != nil {
			return err
		}
		if acked {
			accepted.Store(time.Now().UnixNano())
		}
		if len(rows) < r.cfg.BatchSize {
			sleep(ctx, r.cfg.PollInterval)
		}
	}
	return nil
}

// probeAfter is how long after the broker's last confirm the relay probes
// again before it claims (see probe); probeWait bounds the wait for the
// probe's confirm.
const (
	probeAfter = 250 * time.Millisecond
	probeWait  = time.Second
)

// probeKey is the routing key of the probe: no queue has this name, so the
// default exchange drops the probe (and confirms it at once).
const probeKey = "stampede.relay.alarm-probe"

// probe publishes one empty, transient, unroutable message on pc and waits
// up to probeWait for its confirm; it reports whether the broker confirmed
// it. RabbitMQ tells a connection of a memory or disk alarm
// (connection.blocked) only when the connection publishes: a relay that was
// idle when the alarm came would learn of it only from the batch it claimed
// next, which would then sit SENDING until its confirm timeout. The probe
// makes the broker tell it first; while blocked the probe is not confirmed
// and the loop goes back to waitUnblocked. Costs one round trip per claim
// after a quiet spell; none while batches are being confirmed.
func (r *Relay) probe(ctx context.Context, pc *pubChannel) bool {
	pctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(pctx, "", probeKey, false, false, probeMessage)
	if err != nil || dc == nil {
		return false
	}
	ok, err := dc.WaitContext(pctx)
	return err == nil && ok
}

// probeLoop publishes a probe (unconfirmed, on a channel of its own on the
// relay's connection) every probeAfter while the relay's last confirmed
// publish (accepted, Unix ns) is older than that and the broker blocks
// nothing: a relay waiting for the confirms of a batch the broker took just
// before an alarm publishes nothing itself, so without it the alarm would
// be learnt (and logged) only when that batch timed out. It returns when
// ctx ends.
func (r *Relay) probeLoop(ctx context.Context, accepted *atomic.Int64) {
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			closeChannel(ch, closeWait)
		}
	}()
	tick := time.NewTicker(probeAfter)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if blocked, _, _ := r.health.Blocked(); blocked || sinceConfirm(accepted) < probeAfter {
			continue
		}
		if ch == nil || ch.IsClosed() {
			var err error
			if ch, err = r.conn.Channel(ctx); err != nil {
				ch = nil
				continue
			}
		}
		if err := ch.PublishWithContext(ctx, "", probeKey, false, false, probeMessage); err != nil {
			closeChannel(ch, closeWait)
			ch = nil
		}
	}
}

// sinceConfirm is the time since the broker last confirmed a publish of the
// relay's loop (accepted: Unix ns, 0 = never).
func sinceConfirm(accepted *atomic.Int64) time.Duration {
	return time.Since(time.Unix(0, accepted.Load()))
}

// probeMessage is the probe: empty, transient, unroutable (probeKey).
var probeMessage = amqp.Publishing{AppId: "stampede", Type: "probe"}

// waitUnblocked returns at once unless the broker blocks publishers; then
// it waits (claiming nothing, so no row sits SENDING) until it unblocks. It
// reports false when ctx ended meanwhile.
func (r *Relay) waitUnblocked(ctx context.Context) bool {
	blocked, _, unblocked := r.health.Blocked()
	if !blocked {
		return true
	}
	r.m.relayPaused.Inc()
	for blocked {
		select {
		case <-ctx.Done():
			return false
		case <-unblocked:
		}
		blocked, _, unblocked = r.health.Blocked()
	}
	return true
}

func (r *Relay) open(ctx context.Context) (*pubChannel, error) {
	ch, err := r.conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("relay: confirm mode: %w", err)
	}
	// Buffered for a whole batch: the library delivers returns synchronously
	// before the matching ack, and never blocks on a listener with room, so
	// every return of a batch is in the buffer once its confirms are in.
	return &pubChannel{
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, r.cfg.BatchSize)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

// relay publishes a claimed batch and records the outcome of every row. It
// runs to the end even if ctx is cancelled meanwhile (bounded by
// ConfirmTimeout and the marking timeouts).
func (r *Relay) relay(ctx context.Context, pc *pubChannel, rows []persistence.OutboxRow) (acked bool, err error) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ConfirmTimeout)
	defer cancel()
	b := &relayBatch{rows: rows, failed: map[int]string{}, outcome: map[int]publishOutcome{}}
	// A publish whose write the broker stopped reading (a blocked
	// connection whose socket buffers are full) would wait for the alarm
	// to end: past the confirm timeout the connection is dropped, which
	// fails the write.
	watchdog := time.AfterFunc(r.cfg.ConfirmTimeout+closeWait, func() {
		r.log.Warn("relay: publish did not return within the confirm timeout; dropping the connection")
		r.conn.Drop()
	})
	confirms, published := r.publish(bctx, pc, b)
	watchdog.Stop()
	r.awaitConfirms(bctx, pc, b, confirms, published)
	r.collectReturns(pc, b)
	return b.acked, r.settle(ctx, b)
}

// relayBatch is one claimed batch and what went wrong with its rows.
type relayBatch struct {
	rows    []persistence.OutboxRow
	failed  map[int]string // row index → cause
	outcome map[int]publishOutcome
	acked   bool // the broker confirmed at least one row
}

func (b *relayBatch) fail(i int, o publishOutcome, cause string) {
	b.failed[i] = cause
	b.outcome[i] = o
}

// publish sends every row of b with a deferred confirm; after a publish
// error the rest of the batch fails with it. confirms[i] is nil for a row
// not sent.
func (r *Relay) publish(bctx context.Context, pc *pubChannel, b *relayBatch) (confirms []*amqp.DeferredConfirmation, published []time.Time) {
	confirms = make([]*amqp.DeferredConfirmation, len(b.rows))
	published = make([]time.Time, len(b.rows))
	for i, row := range b.rows {
		msg := amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/json",
			MessageId:    row.EventID,
			Type:         string(row.EventType),
			AppId:        "stampede",
			Timestamp:    time.Now(),
			Body:         row.Payload,
		}
		if row.DelayMS > 0 {
			msg.Expiration = strconv.FormatInt(row.RemainingMS, 10)
		}
		published[i] = time.Now()
		dc, err := pc.ch.PublishWithDeferredConfirmWithContext(bctx, row.Exchange, row.RoutingKey, mustRoute(row.Exchange, row.RoutingKey), false, msg)
		if err != nil {
			for j := i; j < len(b.rows); j++ {
				b.fail(j, pubFailed, "publish: "+err.Error())
			}
			break
		}
		confirms[i] = dc
	}
	return confirms, published
}

// awaitConfirms waits for the broker's confirm of every published row until
// bctx ends; a row nacked, left unconfirmed by a closed channel or by the
// timeout fails. After a timeout the channel is dropped: late confirms of
// this batch must not be mistaken for anything; the next round opens a
// fresh one. After a nack it is dropped too: a channel that published to a
// quorum queue while the queue had no leader (its leader's node died)
// keeps being nacked by RabbitMQ 3.10 after a new leader is elected, while
// a new channel on the same connection is acked (issue 13: reproduced on a
// 3-node cluster, systest TestRabbitClusterLeaderKilled).
func (r *Relay) awaitConfirms(bctx context.Context, pc *pubChannel, b *relayBatch, confirms []*amqp.DeferredConfirmation, published []time.Time) {
	timedOut, nacked := false, false
	for i, dc := range confirms {
		if dc == nil {
			continue
		}
		if timedOut {
			if !dc.Acked() {
				b.fail(i, pubTimeout, "confirm timeout")
			}
			continue
		}
		select {
		case <-dc.Done():
			row := b.rows[i]
			if !dc.Acked() {
				if pc.ch.IsClosed() {
					b.fail(i, pubClosed, "channel closed before confirm")
					continue
				}
				b.fail(i, pubNacked, "nacked by broker")
				nacked = true
			}
			b.acked = b.acked || dc.Acked()
			r.health.published(queuesOf(row.Exchange, row.RoutingKey), dc.Acked())
			r.m.confirm.Observe(time.Since(published[i]).Seconds())
		case <-bctx.Done():
			timedOut = true
			if !dc.Acked() {
				b.fail(i, pubTimeout, "confirm timeout")
			}
		}
	}
	if timedOut || nacked {
		r.dropChannel(pc, timedOut)
	}
}

// dropChannel gives up pc after a nack or a confirm timeout without ever
// waiting for a close the broker will not answer: while the broker blocks
// publishers it reads nothing from this connection, and Channel.Close would
// wait for the alarm to end (issue 27). The close goes on in the background
// and the next round opens a fresh channel once the broker unblocks. A
// broker that does not answer the close within closeWait without having
// blocked the connection (timedOut: it stopped answering) costs the
// connection: it is dropped, and the next round dials again.
func (r *Relay) dropChannel(pc *pubChannel, timedOut bool) {
	pc.dropped = true
	if closeChannel(pc.ch, closeWait) || !timedOut || r.conn.Blocked() {
		return
	}
	r.log.Warn("relay: broker did not answer a channel close after a confirm timeout; dropping the connection")
	r.conn.Drop()
}

// collectReturns fails the rows the broker returned unroutable (mandatory
// publishes). Every return of the batch arrived before its ack (see open),
// so the buffer holds them all once the confirms are in.
func (r *Relay) collectReturns(pc *pubChannel, b *relayBatch) {
	index := make(map[string]int, len(b.rows))
	for i, row := range b.rows {
		index[row.EventID] = i
	}
	for {
		select {
		case ret, ok := <-pc.returns:
			if !ok {
				return
			}
			if i, found := index[ret.MessageId]; found {
				b.fail(i, pubReturned, fmt.Sprintf("returned: %d %s", ret.ReplyCode, ret.ReplyText))
			}
		default:
			return
		}
	}
}

// settle counts the batch's outcomes and records them: the confirmed rows
// SENT, the failed ones RETRY (or DEAD past the budget) with one statement
// per distinct cause (a batch usually fails for one).
func (r *Relay) settle(ctx context.Context, b *relayBatch) error {
	rows, failed := b.rows, b.failed
	acked := make([]int64, 0, len(rows))
	for i, row := range rows {
		if _, bad := failed[i]; !bad {
			acked = append(acked, row.ID)
		}
	}
	r.m.publishes[pubAcked].Add(float64(len(acked)))
	for _, o := range b.outcome {
		r.m.publishes[o].Inc()
	}
	if r.TestSignals.AfterConfirm != nil {
		if err := r.TestSignals.AfterConfirm(acked); err != nil {
			return fmt.Errorf("relay: after confirm: %w", err)
		}
	}
	if len(acked) > 0 {
		err := r.mark(ctx, func(mctx context.Context) error { return r.store.MarkSent(mctx, r.cfg.Owner, acked) })
		if err != nil {
			// The rows stay SENDING and are published again after the lease.
			r.log.Error("relay: mark sent failed; rows will be sent again", "rows", len(acked), "err", err)
		} else {
			r.m.relaySent.Add(float64(len(acked)))
		}
	}
	if len(failed) > 0 {
		// The first batch of a run of failures is logged, the rest counted
		// (stampede_relay_publishes_total by outcome, and
		// stampede_loop_failures_total{loop="relay_publish"}).
		i, cause := firstCause(failed)
		r.pubFails.Fail(fmt.Errorf("%d rows failed, e.g. event %s of order %s: %s", len(failed), rows[i].EventID, rows[i].OrderNo, cause))
	} else {
		r.pubFails.OK()
	}
	byCause := map[string][]int{}
	for i, cause := range failed {
		byCause[cause] = append(byCause[cause], i)
	}
	for cause, idx := range byCause {
		r.markRetry(ctx, rows, idx, cause)
	}
	return nil
}

// markRetry records rows[idx], failed for cause, as RETRY (DEAD past the
// retry budget, logged one by one).
func (r *Relay) markRetry(ctx context.Context, rows []persistence.OutboxRow, idx []int, cause string) {
	ids := make([]int64, len(idx))
	for j, i := range idx {
		ids[j] = rows[i].ID
	}
	var dead []int64
	err := r.mark(ctx, func(mctx context.Context) (err error) {
		dead, err = r.store.MarkRetryBatch(mctx, r.cfg.Owner, ids, cause, r.cfg.RetryBackoff, r.cfg.MaxRetryBackoff, r.cfg.MaxRetries)
		return err
	})
	if err != nil {
		r.log.Error("relay: mark retry failed; rows are retried after their lease", "rows", len(ids),
			"eventId", rows[idx[0]].EventID, "err", err)
		return
	}
	r.m.relayRetry.Add(float64(len(ids)))
	for _, id := range dead {
		r.m.relayDead.Inc()
		for _, i := range idx {
			if row := rows[i]; row.ID == id {
				r.log.Error("relay: outbox row is DEAD", "id", row.ID, "eventId", row.EventID, "orderNo", row.OrderNo,
					"retries", row.RetryCount+1, "cause", cause)
			}
		}
	}
}

// mark runs a MarkSent/MarkRetry with a context detached from Run's, retrying
// with backoff for up to half the lease (after that the row's lease may be
// taken over anyway).
func (r *Relay) mark(ctx context.Context, fn func(context.Context) error) error {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/2)
	defer cancel()
	bo := newBackoff(50*time.Millisecond, 2*time.Second)
	for {
		err := fn(mctx)
		if err == nil || !persistence.IsRetryable(err) || mctx.Err() != nil {
			return err
		}
		if !sleep(mctx, bo.next()) {
			return err
		}
	}
}

func firstCause(failed map[int]string) (int, string) {
	for i, c := range failed {
		return i, c
	}
	return 0, ""
}
