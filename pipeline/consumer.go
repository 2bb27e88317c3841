package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// Handler names. ConsumerOrderLock is also the consumer_name of the consume
// log rows LockStock writes, so it must never change.
const (
	ConsumerOrderLock    = "order-lock"
	ConsumerStockRelease = "stock-release"
	ConsumerOrderClose   = "order-close"
)

// ConsumerConfig configures a Consumer. Zero fields take the documented default.
type ConsumerConfig struct {
	// Name prefixes the AMQP consumer tags ("<Name>.<handler>.<random>").
	// Default "<hostname>-<pid>-<random>".
	Name string
	// Prefetch is the most unacknowledged messages per handler (basic.qos on
	// its channel). Default 64 (docs/architecture.md, "Queue types, delivery
	// limits, confirms and prefetch", has the measurements behind it). Every prefetched message that is still
	// unacknowledged when the channel closes (shutdown, reconnect) goes back
	// to its queue, and a quorum queue counts that against the message's
	// delivery limit.
	Prefetch int
	// Workers is the number of goroutines handling messages, per handler
	// (not the order-lock handler: its batches run on LockChannels).
	// Default 8.
	Workers int
	// LockBatch is the most ORDER_CREATED messages the order-lock handler
	// applies in one MySQL transaction (persistence.Store.LockStockBatch).
	// Default 256; 1…persistence.MaxLockBatch. Each order-lock channel
	// prefetches max(Prefetch, 2·LockBatch) messages so the next batch is
	// in hand when one commits.
	LockBatch int
	// LockBatchWait is how long a batch waits to fill once its first message
	// arrived: a lone order waits at most this before its transaction.
	// Default 5ms.
	LockBatchWait time.Duration
	// LockChannels is the number of order-lock batches applied at once,
	// each on its own AMQP channel and consumer (a multiple ack covers
	// exactly one batch only on a channel that has one batch in hand).
	// Default 2.
	LockChannels int
	// PayTimeout is how long a locked order waits for payment: its
	// pay_deadline is the database's now + PayTimeout (docs/spec.md §7,
	// STAMPEDE_PAY_TIMEOUT). Default 15m.
	PayTimeout time.Duration
	// ReleaseMarkerTTL is the life of the Redis marker that makes a release
	// happen once; it must outlive every redelivery of a release. Default
	// 7 days (168h).
	ReleaseMarkerTTL time.Duration
	// HandleTimeout bounds the handling of one message (its MySQL
	// transaction or Redis script). Default 30s.
	HandleTimeout time.Duration
	// RetryBackoff and MaxRetryBackoff bound how long a worker waits before
	// it requeues a message that failed with a transient error (MySQL or
	// Redis down); the wait doubles with each consecutive failure of that
	// worker. Defaults 500ms and 10s.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// MaxAttempts is the most deliveries of one message that fail with a
	// transient error: after the MaxAttempts-th it goes to QueueDLQ instead
	// of a delay queue (STAMPEDE_CONSUMER_MAX_ATTEMPTS). Default 5. Give the
	// Conn's TopologyConfig the same value: on quorum queues it sets the
	// broker's delivery limit for messages that are never acknowledged.
	MaxAttempts int
	// PublishTimeout bounds a retry or dead-letter republish and its
	// publisher confirm. Default 5s.
	PublishTimeout time.Duration
	// PublishConn is the connection of the retry and dead-letter
	// republishes. Default: the consuming connection. Give it one of its
	// own: RabbitMQ blocks a connection that publishes during a memory or
	// disk alarm and then reads nothing from it, acknowledgements of the
	// consumers on it included.
	PublishConn *Conn
	// Logger receives warnings and errors. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the consumer's series. Default: private, unregistered.
	Metrics *Metrics
}

// ErrPoison marks an error as permanent for the consumer: the message goes to
// the dead-letter queue at once (see ConsumerTestSignals.BeforeHandle).
var ErrPoison = errors.New("consumer: poison message")

func (c *ConsumerConfig) setDefaults() {
	c.Name = cmp.Or(c.Name, instanceName())
	c.Prefetch = cmp.Or(c.Prefetch, 64)
	c.Workers = cmp.Or(c.Workers, 8)
	c.LockBatch = cmp.Or(c.LockBatch, 256)
	c.LockBatchWait = cmp.Or(c.LockBatchWait, 5*time.Millisecond)
	c.LockChannels = cmp.Or(c.LockChannels, 2)
	c.PayTimeout = cmp.Or(c.PayTimeout, 15*time.Minute)
	c.ReleaseMarkerTTL = cmp.Or(c.ReleaseMarkerTTL, 7*24*time.Hour)
	c.HandleTimeout = cmp.Or(c.HandleTimeout, 30*time.Second)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, 500*time.Millisecond)
	c.MaxRetryBackoff = cmp.Or(c.MaxRetryBackoff, 10*time.Second)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, 5*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field.
func (c *ConsumerConfig) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("invalid config: consumer name must be set")
	case c.Prefetch < 1 || c.Prefetch > 65535:
		return fmt.Errorf("invalid config: consumer prefetch %d not in 1…65535", c.Prefetch)
	case c.Workers < 1:
		return fmt.Errorf("invalid config: consumer workers %d", c.Workers)
	case c.LockBatch < 1 || c.LockBatch > persistence.MaxLockBatch:
		return fmt.Errorf("invalid config: consumer lock batch %d not in 1…%d", c.LockBatch, persistence.MaxLockBatch)
	case c.LockBatchWait <= 0 || c.LockBatchWait > time.Second:
		return fmt.Errorf("invalid config: consumer lock batch wait %v not in (0, 1s]", c.LockBatchWait)
	case c.LockChannels < 1 || c.LockChannels > 64:
		return fmt.Errorf("invalid config: consumer lock channels %d not in 1…64", c.LockChannels)
	case c.PayTimeout <= 0 || c.HandleTimeout <= 0:
		return errors.New("invalid config: consumer pay and handle timeouts must be positive")
	case c.ReleaseMarkerTTL < time.Second:
		return fmt.Errorf("invalid config: consumer release marker TTL %v below 1s", c.ReleaseMarkerTTL)
	case c.RetryBackoff <= 0 || c.MaxRetryBackoff < c.RetryBackoff:
		return fmt.Errorf("invalid config: consumer retry backoff %v…%v", c.RetryBackoff, c.MaxRetryBackoff)
	case c.MaxAttempts < 1 || c.MaxAttempts > 100:
		return fmt.Errorf("invalid config: consumer max attempts %d not in 1…100", c.MaxAttempts)
	case c.PublishTimeout <= 0:
		return fmt.Errorf("invalid config: consumer publish timeout %v", c.PublishTimeout)
	}
	return nil
}

// Consumer runs the order-lock, stock-release and order-close handlers
// (docs/spec.md §1 "consumer"), each on its own channel with manual acknowledgement:
// a message is acked only after the MySQL commit or the Redis script that
// applied it returned, so a consumer killed mid-way gets its messages
// redelivered and the consume log / release marker / conditional update
// makes the second application a no-op.
//
// A message that cannot be decoded or does not fit its queue goes to the
// dead-letter queue QueueDLQ at once. A transient error
// (persistence.IsRetryable, Redis unreachable) sends it to a delay queue
// (see QueueDLQ's doc for the topology) until MaxAttempts deliveries failed,
// then to the dead-letter queue. The original is acked only after the broker
// confirmed the copy; if the republish fails, the worker waits with
// exponential backoff and requeues, so an outage never becomes a hot loop.
type Consumer struct {
	cfg   ConsumerConfig
	store *persistence.Store
	rdb   redis.UniversalClient
	conn  *Conn
	log   *slog.Logger
	m     *Metrics

	breakers map[string]*breaker // by handler name; read-only after NewConsumer
	pubConn  *Conn               // retries and dead letters (ConsumerConfig.PublishConn)
	health   *BrokerHealth       // pubConn's

	// TestSignals are set by tests only, before Run (testsignals.go).
	TestSignals ConsumerTestSignals
}

// NewConsumer returns a Consumer; cfg is completed with defaults and
// validated. conn should not be shared with the relay.
func NewConsumer(store *persistence.Store, rdb redis.UniversalClient, conn *Conn, cfg ConsumerConfig) (*Consumer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "consumer")
	// One breaker per handler: order-lock and order-close guard MySQL,
	// stock-release guards Redis.
	breakers := map[string]*breaker{}
	for _, h := range []string{ConsumerOrderLock, ConsumerStockRelease, ConsumerOrderClose} {
		breakers[h] = newBreaker("consumer-"+h, log)
	}
	pubConn := cmp.Or(cfg.PublishConn, conn)
	return &Consumer{cfg: cfg, store: store, rdb: rdb, conn: conn, log: log, m: orNew(cfg.Metrics), breakers: breakers,
		pubConn: pubConn, health: pubConn.Health()}, nil
}

// verdict is what a handler decided about one message.
type verdict int

const (
	ack          verdict = iota // applied: acknowledge
	ackDuplicate                // applied before (consume log, release marker): acknowledge
	ackSkipped                  // nothing to apply any more (the order moved on): acknowledge
	retry                       // transient failure: wait, then requeue
	discard                     // poison: reject without requeue
)

// outcome is the verdict's stampede_consumer_messages_total{outcome}.
func (v verdict) outcome() string {
	switch v {
	case ack:
		return OutcomeOK
	case ackDuplicate:
		return OutcomeDuplicate
	case ackSkipped:
		return OutcomeSkipped
	case retry:
		return OutcomeRetry
	}
	return OutcomeDeadLetter
}

type handler struct {
	name  string
	queue string
	fn    func(ctx context.Context, ev order.Event) (verdict, error)
	// batched: the handler is the order-lock batch loop (lockBatches), not
	// fn on Workers goroutines.
	batched bool
}

// Run consumes until ctx is cancelled, reconnecting whenever a channel or
// the connection closes. On return every handler has stopped, messages in
// hand were finished and acked, and prefetched ones are back in their queue.
// It returns nil after a cancelled ctx, or ErrConnClosed (wrapped) if its
// Conn was closed while it ran.
func (c *Consumer) Run(ctx context.Context) error {
	handlers := []handler{
		{ConsumerStockRelease, QueueStockRelease, c.release, false},
		{ConsumerOrderClose, QueueOrderClose, c.close, false},
	}
	for range c.cfg.LockChannels {
		handlers = append(handlers, handler{ConsumerOrderLock, QueueOrderCreated, nil, true})
	}
	errs := make([]error, len(handlers))
	var wg sync.WaitGroup
	for i, h := range handlers {
		wg.Go(func() { errs[i] = c.consume(ctx, h) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// consume runs one handler, reopening its channel with backoff. It returns
// nil once ctx is cancelled, or an error if the Conn was closed.
func (c *Consumer) consume(ctx context.Context, h handler) error {
	bo := newBackoff(c.cfg.RetryBackoff, c.cfg.MaxRetryBackoff)
	for ctx.Err() == nil {
		start := time.Now()
		err := c.consumeOnce(ctx, h)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrConnClosed) {
			return fmt.Errorf("consumer %s: %w", h.name, err)
		}
		if time.Since(start) > time.Minute {
			bo.reset() // it ran fine for a while: reconnect quickly
		}
		c.log.Warn("consumer: channel closed, reconnecting", "handler", h.name, "err", err)
		sleep(ctx, bo.next())
	}
	return nil
}

// consumeOnce consumes h's queue on a fresh channel until the channel closes
// or ctx is cancelled.
func (c *Consumer) consumeOnce(ctx context.Context, h handler) error {
	ch, err := c.conn.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close() // unacked prefetched messages go back to the queue
	prefetch := c.cfg.Prefetch
	if h.batched {
		prefetch = min(max(prefetch, 2*c.cfg.LockBatch), 65535)
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return fmt.Errorf("consumer %s: qos: %w", h.name, err)
	}
	tag := c.cfg.Name + "." + h.name + "." + strconv.FormatUint(rand.Uint64()&0xffffff, 16)
	deliveries, err := ch.Consume(h.queue, tag, false, false, false, false, nil)
	if err != nil {
		c.health.consumed(h.queue, err)
		return fmt.Errorf("consumer %s: consume %s: %w", h.name, h.queue, err)
	}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	c.health.consumed(h.queue, nil)
	pub := &confirmPublisher{conn: c.pubConn, health: c.health, timeout: c.cfg.PublishTimeout}
	defer pub.close()
	var wg sync.WaitGroup
	if h.batched {
		wg.Go(func() { c.lockBatches(ctx, h, deliveries, pub) })
	} else {
		for range c.cfg.Workers {
			wg.Go(func() { c.work(ctx, h, deliveries, pub) })
		}
	}
	wg.Wait()
	select {
	case e, ok := <-closes:
		if ok && e != nil {
			return e
		}
		return errors.New("channel closed")
	default:
		return nil
	}
}

// work handles deliveries one at a time until the channel closes or ctx is
// cancelled.
func (c *Consumer) work(ctx context.Context, h handler, deliveries <-chan amqp.Delivery, pub *confirmPublisher) {
	st := &settler{bo: newBackoff(c.cfg.RetryBackoff, c.cfg.MaxRetryBackoff)}
	inFlight := c.m.inFlight.WithLabelValues(h.name)
	for {
		var d amqp.Delivery
		var ok bool
		select {
		case <-ctx.Done():
			return
		case d, ok = <-deliveries:
			if !ok {
				return
			}
		}
		inFlight.Inc()
		attempt := attemptOf(d.Headers)
		v, ev, err := c.handle(ctx, h, d.Body, attempt)
		if _, retried := c.settle(ctx, h, d, v, ev, err, attempt, pub, st, true); retried {
			// The worker also slows down: a broken dependency fails every
			// message, and the delay queues hold them meanwhile.
			sleep(ctx, st.bo.next())
		}
		inFlight.Dec()
	}
}

// settler is the retry state of one worker (or batch loop): its backoff and
// how many messages in a row failed.
type settler struct {
	bo      *backoff
	failing int
}

// settle carries out the verdict on d: ack (only if ackNow; otherwise the
// caller acks it with a multiple ack after its batch), a republish to a delay
// queue or the dead-letter queue followed by the ack of the original, or,
// when that republish fails, a requeue after the worker's backoff. It counts
// the outcome and reports whether d still needs its ack (an ack verdict with
// ackNow false) and whether it went to a delay queue (the caller then slows
// down by the settler's backoff).
func (c *Consumer) settle(ctx context.Context, h handler, d amqp.Delivery, v verdict, ev order.Event, err error, attempt int,
	pub *confirmPublisher, st *settler, ackNow bool) (pendingAck, retried bool) {
	routingKey := strHeader(d.Headers, HeaderRoutingKey) // kept through the delay queues
	if routingKey == "" {
		routingKey = d.RoutingKey
	}
	outcome := v.outcome()
	// An outage (the dependency did not answer) is no fault of the
	// message: it waits in a delay queue without spending its attempt
	// budget, so an outage of any length never dead-letters good orders
	// (docs/spec.md §5.5). Only failures the dependency answered count.
	outage := v == retry && isOutage(err)
	if v == retry && !outage && attempt >= c.cfg.MaxAttempts {
		v, err = discard, fmt.Errorf("out of attempts (%d): %w", attempt, err)
	}
	defer func() { c.m.consumed(h.name, outcome) }()
	switch v {
	case ack, ackDuplicate, ackSkipped:
		st.failing = 0
		st.bo.reset()
		if !ackNow {
			return true, false
		}
		if err := d.Ack(false); err != nil {
			// The channel is gone: the message is redelivered and its
			// second application changes nothing.
			c.log.Debug("consumer: ack failed", "handler", h.name, "eventId", d.MessageId, "err", err)
			return false, false
		}
	case discard:
		outcome = OutcomeDeadLetter
		if perr := c.deadLetter(ctx, h, d, ev, err, attempt, routingKey, pub); perr != nil {
			c.requeueLater(ctx, h, d, st.bo, perr)
			outcome = OutcomeRetry
		}
	case retry:
		st.failing++
		if st.failing == 1 || st.failing%20 == 0 {
			c.log.Warn("consumer: transient failure, retrying through a delay queue", "handler", h.name,
				"eventId", d.MessageId, "orderNo", ev.OrderNo, "attempt", attempt, "consecutive", st.failing, "err", err)
		}
		if perr := c.retryLater(ctx, h, d, attempt, outage, routingKey, pub); perr != nil {
			c.requeueLater(ctx, h, d, st.bo, perr)
			return false, false
		}
		return false, true
	}
	return false, false
}

// requeueLater is the fallback when a retry or dead-letter republish failed
// (the broker is away or the publish channel broke): wait the worker's
// backoff, then requeue, so the message is not lost and not spun on.
func (c *Consumer) requeueLater(ctx context.Context, h handler, d amqp.Delivery, bo *backoff, err error) {
	if errors.Is(err, errBrokerBlocked) { // logged once by BrokerHealth for the whole alarm
		c.log.Debug("consumer: broker blocks publishers, requeueing after backoff", "handler", h.name, "eventId", d.MessageId)
	} else {
		c.log.Warn("consumer: republish failed, requeueing after backoff", "handler", h.name, "eventId", d.MessageId, "err", err)
	}
	sleep(ctx, bo.next())
	_ = d.Nack(false, true)
}

// maxLoggedBody is the most bytes of a rejected message's body logged.
const maxLoggedBody = 2048

// handle decodes a body and runs the handler with a context that survives
// shutdown for up to HandleTimeout, so a message in hand is finished. It
// returns the decoded event (zero if the body did not decode) for logging.
func (c *Consumer) handle(ctx context.Context, h handler, body []byte, attempt int) (verdict, order.Event, error) {
	ev, err := order.DecodeEvent(body)
	if err != nil {
		return discard, ev, err
	}
	if c.TestSignals.BeforeHandle != nil {
		if err := c.TestSignals.BeforeHandle(h.name, ev, attempt); err != nil {
			if errors.Is(err, ErrPoison) {
				return discard, ev, err
			}
			return retry, ev, err
		}
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.HandleTimeout)
	defer cancel()
	var v verdict
	var herr error
	err = guard(c.breakers[h.name], func() error {
		v, herr = h.fn(hctx, ev)
		if v != retry {
			return nil // the dependency answered
		}
		return herr
	})
	if isBreakerRejection(err) {
		return retry, ev, err
	}
	err = herr
	return v, ev, err
}

// release gives a CANCELLED or FAILED order's Redis reservation back, once
// (a per-order marker). A status batch (the sweeper's closes of one pass, one
// product) gives back all of its orders in one Redis pipeline
// (lua.ReleaseMany); a transient failure retries the whole message, and the
// orders released before it are no-ops then.
//
// Defence in depth: only orders MySQL has released — CANCELLED or FAILED
// with their RELEASE flow (persistence.Store.ReleasedOrders, one read per
// message) — are given back. An event naming an order MySQL still holds
// would otherwise let Redis sell a unit MySQL then refuses; such an order is
// logged at error and counted (stampede_consumer_releases_refused_total),
// nothing of it changes, and the message goes to the dead-letter queue at
// once after the message's other orders are given back (the refusal is no
// transient failure: the event came from a committed outbox row, so a retry
// would read the same rows; in the DLQ an operator sees it, and a replay
// gives back nothing twice).
func (c *Consumer) release(ctx context.Context, ev order.Event) (verdict, error) {
	events := []order.Event{ev}
	switch {
	case ev.Type == order.EventStatusBatch && ev.Status.ReleasesStock():
		events = ev.Events
	case ev.Type != order.EventStatusChanged || !ev.Status.ReleasesStock():
		return discard, fmt.Errorf("consumer: %s %s event on %s", ev.Type, ev.Status, QueueStockRelease)
	}
	type target struct {
		keys lua.Keys
		e    order.Event
	}
	targets := make([]target, 0, len(events))
	nos := make([]string, 0, len(events))
	for _, e := range events {
		_, shard, pid, err := order.ParseNo(e.OrderNo)
		if err != nil || pid != e.ProductID || e.Quantity <= 0 || e.UserID <= 0 {
			return discard, fmt.Errorf("consumer: release event %s does not match its orderNo or lacks user/quantity", e.EventID)
		}
		targets = append(targets, target{lua.ShardKeys(pid, shard), e})
		nos = append(nos, e.OrderNo)
	}
	released, err := c.store.ReleasedOrders(ctx, nos)
	if err != nil {
		return classify(err)
	}
	var calls []lua.ReleaseCall
	refused := 0
	for _, t := range targets {
		if !released[t.e.OrderNo] {
			refused++
			c.m.releaseRefused.Inc()
			c.log.Error("consumer: release refused: MySQL has not released the order (not CANCELLED or FAILED with a RELEASE flow)",
				"orderNo", t.e.OrderNo, "status", t.e.Status, "eventId", ev.EventID)
			continue
		}
		calls = append(calls, lua.ReleaseCall{Keys: t.keys, OrderNo: t.e.OrderNo, UserID: t.e.UserID, Quantity: t.e.Quantity})
	}
	// One pipeline for the message's orders (a status batch holds a close
	// pass's, up to 2,000): one round trip instead of one each.
	start := time.Now()
	err = lua.ReleaseMany(ctx, c.rdb, calls, c.cfg.ReleaseMarkerTTL)
	for range calls { // the pipeline's time shared out: one observation per script call
		c.m.luaRelease.Observe(time.Since(start).Seconds() / float64(len(calls)))
	}
	if err != nil {
		// ErrNotFound (the shard's stock hash is missing, e.g. Redis lost
		// its data) is retried too: releasing into nothing would lose the
		// units, and the product is reloaded by the gateway or an operator.
		// The orders released already are no-ops the next time (markers).
		return retry, err
	}
	if refused > 0 {
		return discard, fmt.Errorf("consumer: release refused for %d of %d orders: MySQL has not released them (not CANCELLED or FAILED with a RELEASE flow)",
			refused, len(targets))
	}
	for _, call := range calls {
		if call.Released {
			return ack, nil
		}
	}
	return ackDuplicate, nil
}

// close applies an expired pay-timeout message: WAITING_PAY → CANCELLED if
// the deadline has passed on the database clock.
func (c *Consumer) close(ctx context.Context, ev order.Event) (verdict, error) {
	if ev.Type != order.EventPayTimeout {
		return discard, fmt.Errorf("consumer: %s event on %s", ev.Type, QueueOrderClose)
	}
	o, err := c.store.CloseOrder(ctx, persistence.CloseRequest{OrderNo: ev.OrderNo, Reason: order.ReasonTimeout,
		From: []order.Status{order.WaitingPay}, Due: true})
	if err == nil {
		_ = CacheStatus(ctx, c.rdb, o, c.log) // replays answer CANCELLED (statuscache.go)
	}
	switch {
	case errors.Is(err, persistence.ErrInvalidState):
		return ackSkipped, nil // paid or closed meanwhile
	case errors.Is(err, persistence.ErrNotDue):
		return ackSkipped, nil // early by a clock skew: the sweeper closes it when due
	}
	return classify(err)
}

// classify maps a store error to a verdict. It checks the sentinels first:
// persistence.IsRetryable counts every non-MySQL error as transient.
func classify(err error) (verdict, error) {
	switch {
	case err == nil:
		return ack, nil
	case errors.Is(err, persistence.ErrNotFound), errors.Is(err, persistence.ErrInvalidState),
		errors.Is(err, persistence.ErrConflict), errors.Is(err, persistence.ErrAmount):
		return discard, err
	case persistence.IsRetryable(err):
		return retry, err
	}
	return discard, err
}
