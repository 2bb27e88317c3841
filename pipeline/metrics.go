package pipeline

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/metric"
	"github.com/stampede-sh/stampede/order"
)

// Metrics are the Prometheus collectors of the writer, relay, consumer and
// sweeper. Build one per registry with NewMetrics and pass it in each
// component's config; a component without one keeps private, unregistered
// collectors. The series that describe shared state (stream backlogs, outbox
// rows, queue depths) are read at scrape time by StateCollector.
//
// Series (all names carry the stampede_ prefix):
//
//	writer_batch_entries                      histogram: reservations per committed writer transaction
//	writer_commit_duration_seconds            histogram: one batch's MySQL transaction (InsertReservations)
//	writer_entries_total{outcome}             written, duplicate, reused (stored FAILED), dead (to the dead stream)
//	writer_claimed_entries_total              entries taken over from silent writers (XAUTOCLAIM)
//	writer_batch_failures_total               failed batch attempts (each is retried)
//	relay_publish_confirm_duration_seconds    histogram: publish → broker confirm of one message
//	relay_publishes_total{outcome}            acked, nacked, returned, timeout, closed (channel lost), failed (publish error)
//	relay_dead_rows_total                     outbox rows that spent their retry budget (DEAD)
//	relay_claimed_rows_total                  outbox rows claimed
//	relay_rows_total{result}                  claimed rows marked sent (SENT) or retry (RETRY or DEAD)
//	relay_channel_reopens_total               publish channels a relay opened after its first
//	consumer_messages_total{handler,outcome}  ok, duplicate, retry, dead_letter, skipped
//	consumer_in_flight_messages{handler}      messages this process is handling now (see below)
//	consumer_lock_batch_messages              histogram: ORDER_CREATED messages per order-lock transaction (batch mode)
//	consumer_lock_batch_splits_total          order-lock batches split in two to isolate a failing message
//	consumer_releases_refused_total           release events of orders MySQL has not released (not CANCELLED/FAILED with a RELEASE flow): nothing given back
//	lua_call_duration_seconds{script}         release script latency (defined in package lua, shared with package gateway)
//	sweeper_closed_orders_total               WAITING_PAY → CANCELLED by the pay-deadline sweep
//	sweeper_lost_closes_total                 due orders another closer changed between the sweep's read and its close (wasted attempts)
//	sweeper_errors_total                      failed sweeper queries or closes
//	sweeper_passes_total{pass,result}         pass close or reconcile: done, skipped (another sweeper holds the pass lock, or reconciled recently), error
//	reconcile_drift{product}                  Redis available − (total + adjust − live units), from the last run
//	reconcile_drift_unexplained{product}      the drift of a product with nothing in flight (no intake backlog, PROCESSING order or unpublished outbox row, unchanged for a round), else 0: the one to alert on
//	reconcile_drift_escalations_total         settled drifts no repair explained, each logged once at error
//	reconcile_intake_backlog_entries{product} intake entries not yet written, at the last run
//	reconcile_runs_total{result}              ok, failed (some invariant did not hold), error
//	reconcile_last_run_timestamp_seconds      end of the last reconciliation
//	refunds_pending                           REFUND_PENDING payments, at the last reconciliation round
//	refund_oldest_pending_seconds             age of the oldest REFUND_PENDING payment (0: none), same round
//	sale_units{product,state}                 per active sale, units: available (Σ Redis shards), locked and sold (MySQL stock)
//	sale_orders{product,status}               per active sale, orders per status (PROCESSING … FAILED, 0 included)
//
// The refund and sale series are set by the sweeper that ran the last
// reconciliation round, from what that round read (Reconcile's report, one
// more COUNT over payment's (status, created_at) index): no read of their own.
// A sweeper that skips a round deletes its copies, like the drift's, so a
// stale value never lingers on an instance that stopped reconciling.
//
// Cardinality of sale_*: only active sales carry series — products whose sale
// has started and had not ended an hour ago (SaleActiveAfterEnd), paused ones
// included, at most MaxSaleSeries of them (the newest by id). When a product
// leaves that set (its sale ended over an hour ago, or 50 newer sales
// started), the next round deletes its series (GaugeVec.DeletePartialMatch on
// its product label), so at most 50 × 3 sale_units and 50 × 5 sale_orders
// series exist at any time.
//
// RabbitMQ does not report a queue's unacknowledged count over AMQP 0-9-1
// (only the management API does): consumer_in_flight_messages counts the
// deliveries a handler holds; prefetched deliveries not yet taken by a worker
// (at most the prefetch) are unacknowledged too but not counted.
type Metrics struct {
	writerBatch    prometheus.Histogram
	writerCommit   prometheus.Histogram
	writerWritten  prometheus.Counter
	writerDup      prometheus.Counter
	writerReused   prometheus.Counter
	writerDead     prometheus.Counter
	writerClaimed  prometheus.Counter
	writerFailures prometheus.Counter

	confirm      prometheus.Observer
	publishes    [numPublishOutcomes]prometheus.Counter
	relayDead    prometheus.Counter
	relayClaimed prometheus.Counter
	relaySent    prometheus.Counter
	relayRetry   prometheus.Counter
	relayReopens prometheus.Counter
	relayPaused  prometheus.Counter
	lostReleased prometheus.Counter
	repairs      *prometheus.CounterVec // kind = restored, released (lostwrites.go)
	luaRelease   prometheus.Observer

	consumer   *prometheus.CounterVec
	inFlight   *prometheus.GaugeVec
	lockBatch  prometheus.Histogram
	lockSplits prometheus.Counter
	// releaseRefused: release events of orders MySQL has not released.
	releaseRefused prometheus.Counter
	rejected       atomic.Int64 // messages rejected without requeue, for StateCollector's dlq_depth

	sweeperClosed    prometheus.Counter
	sweeperLost      prometheus.Counter
	sweeperErrors    prometheus.Counter
	outboxPurged     prometheus.Counter
	sweeperPasses    *prometheus.CounterVec
	drift            *prometheus.GaugeVec
	unexplained      *prometheus.GaugeVec // product: drift no order in flight explains
	driftEscalations prometheus.Counter
	reconBacklog     *prometheus.GaugeVec
	reconRuns        *prometheus.CounterVec
	reconLastRunAt   prometheus.Gauge

	amqpBlocked    *prometheus.GaugeVec   // connection (broker.go)
	queueUnhealthy *prometheus.GaugeVec   // queue (broker.go)
	loopFailures   *prometheus.CounterVec // loop (failures.go)

	// Label-less vectors: a sweeper that skips a round Resets them away.
	refundsPending *prometheus.GaugeVec
	refundOldest   *prometheus.GaugeVec
	saleUnits      *prometheus.GaugeVec // product, state
	saleOrders     *prometheus.GaugeVec // product, status
}

// loopNames are the loop labels of stampede_loop_failures_total
// (FailureLog), exported from the start.
var loopNames = []string{"relay_claim", "relay_publish", "pacer_list", "pacer_step", "push_products", "push_lines",
	"sweeper_close", "sweeper_reconcile"}

// Bounds of the sale series (see Metrics).
const (
	// MaxSaleSeries is the most products that carry sale_* series.
	MaxSaleSeries = 50
	// SaleActiveAfterEnd is how long after its end a sale keeps its series.
	SaleActiveAfterEnd = time.Hour
)

// Consumer outcomes, the values of stampede_consumer_messages_total{outcome}.
const (
	OutcomeOK         = "ok"          // applied and acknowledged
	OutcomeDuplicate  = "duplicate"   // already applied (consume log or release marker): acknowledged
	OutcomeRetry      = "retry"       // transient failure: requeued after a backoff
	OutcomeDeadLetter = "dead_letter" // poison: rejected without requeue
	OutcomeSkipped    = "skipped"     // nothing to do any more (order moved on): acknowledged
)

type publishOutcome int

const (
	pubAcked publishOutcome = iota
	pubNacked
	pubReturned
	pubTimeout
	pubClosed
	pubFailed
	numPublishOutcomes
)

var publishOutcomeNames = [numPublishOutcomes]string{"acked", "nacked", "returned", "timeout", "closed", "failed"}

// Bucket bounds.
var (
	batchBuckets   = []float64{1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000}
	latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
)

// NewMetrics creates the pipeline's collectors and registers them with reg
// (nil: unregistered). Calling it twice with one registry returns collectors
// sharing the registered series.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.registerWriter(reg)
	m.registerRelay(reg)
	m.registerBroker(reg)
	m.registerRepair(reg)
	m.registerConsumer(reg)
	m.registerSweeper(reg)
	m.registerReconcile(reg)
	return m
}

// registerWriter creates the writer's collectors (writer_*).
func (m *Metrics) registerWriter(reg prometheus.Registerer) {
	m.writerBatch = metric.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "stampede_writer_batch_entries", Buckets: batchBuckets,
		Help: "Reservations written per committed writer transaction.",
	}))
	m.writerCommit = metric.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "stampede_writer_commit_duration_seconds", Buckets: latencyBuckets,
		Help: "Duration of one writer batch's MySQL transaction (orders, items and outbox rows), committed.",
	}))
	entries := metric.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stampede_writer_entries_total",
		Help: "Intake stream entries handled by writers, by outcome: written (new order), duplicate (already stored), reused (requestId taken: stored FAILED), dead (unparseable: moved to the dead stream).",
	}, []string{"outcome"}))
	m.writerWritten = entries.WithLabelValues("written")
	m.writerDup = entries.WithLabelValues("duplicate")
	m.writerReused = entries.WithLabelValues("reused")
	m.writerDead = entries.WithLabelValues("dead")
	m.writerClaimed = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_writer_claimed_entries_total",
		Help: "Intake entries a writer took over from a silent writer with XAUTOCLAIM.",
	}))
	m.writerFailures = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_writer_batch_failures_total",
		Help: "Failed attempts to write a batch (MySQL or Redis trouble); each is retried with backoff.",
	}))
}

// registerRelay creates the relay's collectors (relay_*).
func (m *Metrics) registerRelay(reg prometheus.Registerer) {
	m.confirm = metric.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "stampede_relay_publish_confirm_duration_seconds", Buckets: latencyBuckets,
		Help: "Time from publishing an outbox row to the broker's confirm (ack or nack).",
	}))
	pubs := metric.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stampede_relay_publishes_total",
		Help: "Outbox rows published by the relay, by outcome: acked (marked SENT), nacked, returned (unroutable), timeout (no confirm in time), closed (channel lost before the confirm), failed (publish error). All but acked go RETRY.",
	}, []string{"outcome"}))
	for i, name := range publishOutcomeNames {
		m.publishes[i] = pubs.WithLabelValues(name)
	}
	m.relayDead = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_relay_dead_rows_total",
		Help: "Outbox rows marked DEAD after their retry budget.",
	}))
	m.relayClaimed = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_relay_claimed_rows_total",
		Help: "Outbox rows the relay claimed (leased) to publish.",
	}))
	rows := metric.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stampede_relay_rows_total",
		Help: "Claimed outbox rows the relay recorded, by result: sent (confirmed and marked SENT), retry (marked RETRY, or DEAD past the retry budget).",
	}, []string{"result"}))
	m.relaySent, m.relayRetry = rows.WithLabelValues("sent"), rows.WithLabelValues("retry")
	m.relayReopens = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_relay_channel_reopens_total",
		Help: "Publish channels a relay opened after its first (the broker or the channel was lost).",
	}))
	m.relayPaused = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_relay_blocked_pauses_total",
		Help: "Times a relay stopped claiming outbox rows because the broker blocked publishers (a memory or disk alarm); it resumes when the broker unblocks.",
	}))
}

// registerBroker creates the collectors of the AMQP connections and queues and of the background loops' failures (FailureLog).
func (m *Metrics) registerBroker(reg prometheus.Registerer) {
	m.amqpBlocked = metric.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stampede_amqp_blocked",
		Help: "1 while RabbitMQ blocks this AMQP connection's publishes (connection.blocked: a memory or disk alarm), else 0. Only connections that publish are ever blocked.",
	}, []string{"connection"}))
	m.queueUnhealthy = metric.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stampede_amqp_queue_unhealthy",
		Help: "1 while the broker nacked the last publishes to the queue in a row (3 or more: the queue is down or refuses them), else 0; /readyz names the queue meanwhile.",
	}, []string{"queue"}))
	m.loopFailures = metric.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stampede_loop_failures_total",
		Help: "Failed rounds of a background loop that talks to a dependency, by loop (relay_claim, relay_publish (batches with failed publishes), pacer_list, pacer_step, push_products, push_lines, sweeper_close, sweeper_reconcile); each failure backs off, and only the first of a run of failures and the recovery are logged.",
	}, []string{"loop"}))
	for _, l := range loopNames {
		m.loopFailures.WithLabelValues(l)
	}
}

// registerRepair creates the collectors of the sweeper's repairs of what Redis lost and of the release script's latency.
func (m *Metrics) registerRepair(reg prometheus.Registerer) {
	m.lostReleased = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_sweeper_lost_reservations_released_total",
		Help: "Redis reservations that never became orders (no intake entry, no MySQL row after the grace period) released by the sweeper.",
	}))
	m.repairs = metric.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stampede_reconcile_repairs_total",
		Help: "Writes Redis lost (a failover, a restart without persistence) repaired by the sweeper's reconciliation, by kind: restored (an order MySQL holds whose reservation Redis lost: its decrement put back), released (a cancelled or failed order whose release Redis lost: its units given back).",
	}, []string{"kind"}))
	m.repairs.WithLabelValues("restored")
	m.repairs.WithLabelValues("released")
	m.luaRelease = metric.Register(reg, lua.NewCallHistogram()).WithLabelValues("release")
}

// registerConsumer creates the consumers' collectors (consumer_*), with a series for every handler and outcome from the start.
func (m *Metrics) registerConsumer(reg prometheus.Registerer) {
	m.consumer = metric.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stampede_consumer_messages_total",
		Help: "Messages handled by the consumers, by handler and outcome: ok, duplicate (applied before), retry (transient error: sent to a delay queue stampede.retry.<n>, or requeued after a backoff when that publish failed), dead_letter (poison or out of attempts: sent to the dead-letter queue stampede.dlq), skipped (order moved on).",
	}, []string{"handler", "outcome"}))
	m.inFlight = metric.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stampede_consumer_in_flight_messages",
		Help: "Deliveries a consumer handler of this process holds unacknowledged right now. RabbitMQ's own unacked count per queue is not available over AMQP 0-9-1; prefetched deliveries not yet taken by a worker (at most the prefetch) are not counted.",
	}, []string{"handler"}))
	m.lockBatch = metric.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "stampede_consumer_lock_batch_messages", Buckets: batchBuckets,
		Help: "ORDER_CREATED messages applied per order-lock MySQL transaction (persistence.LockStockBatch), committed.",
	}))
	m.lockSplits = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_consumer_lock_batch_splits_total",
		Help: "Order-lock batches whose transaction failed with an error that was not an outage and were split in two to isolate the failing message.",
	}))
	m.releaseRefused = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_consumer_releases_refused_total",
		Help: "Orders of release events whose units the release consumer did not give back in Redis because MySQL has not released them (not CANCELLED or FAILED with a RELEASE flow). Should stay 0; each is logged at error.",
	}))
	for _, h := range []string{ConsumerOrderLock, ConsumerStockRelease, ConsumerOrderClose} {
		for _, o := range []string{OutcomeOK, OutcomeDuplicate, OutcomeRetry, OutcomeDeadLetter, OutcomeSkipped} {
			m.consumer.WithLabelValues(h, o)
		}
		m.inFlight.WithLabelValues(h)
	}
}

// registerSweeper creates the sweeper's pay-deadline and outbox-retention collectors (sweeper_*, outbox_purged_rows_total).
func (m *Metrics) registerSweeper(reg prometheus.Registerer) {
	m.sweeperClosed = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_sweeper_closed_orders_total",
		Help: "WAITING_PAY orders the sweeper cancelled because their pay deadline passed.",
	}))
	m.sweeperLost = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_sweeper_lost_closes_total",
		Help: "Due orders the sweeper tried to close that another closer (the close consumer, a payment, a user cancel; never another sweeper while the pass lock works) changed first: wasted close attempts.",
	}))
	m.sweeperErrors = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_sweeper_errors_total",
		Help: "Failed sweeper queries or closes (each pass is tried again after a backoff).",
	}))
	m.outboxPurged = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_outbox_purged_rows_total",
		Help: "SENT outbox rows the sweeper deleted after the retention (STAMPEDE_OUTBOX_RETENTION).",
	}))
	m.sweeperPasses = metric.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stampede_sweeper_passes_total",
		Help: "Sweeper passes by pass (close: one batch of due orders; reconcile: lost-reservation repair, stock repair sync and reconciliation) and result: done, skipped (another sweeper held the pass's MySQL advisory lock, or reconciled less than an interval ago), error, deferred (reconcile only: a due round waited one sweep interval for a sale's hot period to end).",
	}, []string{"pass", "result"}))
	for _, p := range []string{"close", "reconcile"} {
		for _, r := range []string{"done", "skipped", "error"} {
			m.sweeperPasses.WithLabelValues(p, r)
		}
	}
	m.sweeperPasses.WithLabelValues("reconcile", "deferred")
}

// registerReconcile creates the collectors the sweeper's reconciliation round sets: drift, intake backlog, runs, refunds and the sale series.
func (m *Metrics) registerReconcile(reg prometheus.Registerer) {
	m.drift = metric.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stampede_reconcile_drift",
		Help: "Units of drift per product at the last reconciliation: Redis available − (total + adjustments − units of PROCESSING, WAITING_PAY and PAID orders). Non-zero while a sale runs (reservations on their way to MySQL, releases on their way to Redis); must return to 0 once the pipeline is idle.",
	}, []string{"product"}))
	m.unexplained = metric.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stampede_reconcile_drift_unexplained",
		Help: "The drift of a product that nothing in flight explains (no intake backlog, PROCESSING order or unpublished outbox row, and nothing of the product changed since the previous reconciliation), else 0. Alert on this one: stampede_reconcile_drift is non-zero throughout a live sale.",
	}, []string{"product"}))
	m.driftEscalations = metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stampede_reconcile_drift_escalations_total",
		Help: "Settled drifts (stampede_reconcile_drift_unexplained) that the sweeper's repair of writes Redis lost did not explain; each is logged once at error, again only if the product's drift changes.",
	}))
	m.reconBacklog = metric.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stampede_reconcile_intake_backlog_entries",
		Help: "Intake stream entries of a product not yet written by a writer, at the last reconciliation.",
	}, []string{"product"}))
	m.reconRuns = metric.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stampede_reconcile_runs_total",
		Help: "Reconciliation runs by result: ok (every invariant held), failed (some did not, which is expected while orders are in flight), error (Redis or MySQL failed).",
	}, []string{"result"}))
	for _, r := range []string{"ok", "failed", "error"} {
		m.reconRuns.WithLabelValues(r)
	}
	m.reconLastRunAt = metric.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stampede_reconcile_last_run_timestamp_seconds",
		Help: "Unix time at which the last reconciliation finished (0: none yet).",
	}))
	m.refundsPending = metric.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stampede_refunds_pending",
		Help: "REFUND_PENDING payments (money taken for orders no longer payable) waiting for an operator's refund (POST /api/admin/payments/{paymentNo}/refund), at the last reconciliation round. Only the sweeper that ran the round reports it.",
	}, nil))
	m.refundOldest = metric.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stampede_refund_oldest_pending_seconds",
		Help: "Seconds since the oldest REFUND_PENDING payment was recorded (0: none), at the last reconciliation round. Only the sweeper that ran the round reports it.",
	}, nil))
	m.saleUnits = metric.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stampede_sale_units",
		Help: "Units of an active sale (started, not ended more than an hour ago; at most 50, the newest) by state: available (Redis, all shards), locked and sold (MySQL stock), at the last reconciliation round. Series of sales that leave the set are deleted.",
	}, []string{"product", "state"}))
	m.saleOrders = metric.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stampede_sale_orders",
		Help: "Orders of an active sale (see stampede_sale_units) by status, at the last reconciliation round. Series of sales that leave the set are deleted.",
	}, []string{"product", "status"}))
}

func orNew(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}

// consumed counts one message's outcome.
func (m *Metrics) consumed(handler, outcome string) {
	m.consumer.WithLabelValues(handler, outcome).Inc()
	if outcome == OutcomeDeadLetter {
		m.rejected.Add(1)
	}
}

// Rejected is the number of messages this process's consumers rejected
// without requeue since it started.
func (m *Metrics) Rejected() int64 { return m.rejected.Load() }

// setUnexplained exports the drift of a product nothing in flight explains.
func (m *Metrics) setUnexplained(productID, drift int64) {
	m.unexplained.WithLabelValues(strconv.FormatInt(productID, 10)).Set(float64(drift))
}

func (m *Metrics) setDrift(productID, drift, backlog int64) {
	p := strconv.FormatInt(productID, 10)
	m.drift.WithLabelValues(p).Set(float64(drift))
	m.reconBacklog.WithLabelValues(p).Set(float64(backlog))
}

// setRefunds exports the refund queue's size and the age of its oldest entry.
func (m *Metrics) setRefunds(pending int64, oldest time.Duration) {
	m.refundsPending.WithLabelValues().Set(float64(pending))
	m.refundOldest.WithLabelValues().Set(oldest.Seconds())
}

// setSale exports one active sale's units and orders per status.
func (m *Metrics) setSale(productID, available, locked, sold int64, orders map[order.Status]int64) {
	p := strconv.FormatInt(productID, 10)
	m.saleUnits.WithLabelValues(p, "available").Set(float64(available))
	m.saleUnits.WithLabelValues(p, "locked").Set(float64(locked))
	m.saleUnits.WithLabelValues(p, "sold").Set(float64(sold))
	for _, st := range order.Statuses {
		m.saleOrders.WithLabelValues(p, string(st)).Set(float64(orders[st]))
	}
}

// dropSale deletes every sale series of productID.
func (m *Metrics) dropSale(productID int64) {
	l := prometheus.Labels{"product": strconv.FormatInt(productID, 10)}
	m.saleUnits.DeletePartialMatch(l)
	m.saleOrders.DeletePartialMatch(l)
}

// resetRound deletes the series only the sweeper that runs the reconciliation
// rounds exports.
func (m *Metrics) resetRound() {
	m.drift.Reset()
	m.unexplained.Reset()
	m.reconBacklog.Reset()
	m.refundsPending.Reset()
	m.refundOldest.Reset()
	m.saleUnits.Reset()
	m.saleOrders.Reset()
}
