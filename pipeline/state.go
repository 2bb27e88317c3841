package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// StateConfig configures a StateCollector. A nil Redis, Store or Conn leaves
// out the series read from it.
type StateConfig struct {
	// Redis holds the intake streams (lua.StreamsKey lists them).
	Redis redis.UniversalClient
	// Store holds the outbox and the orders.
	Store *persistence.Store
	// Conn reaches RabbitMQ for the queue depths. Give the collector its own
	// Conn (with a no-op Setup): a passive declare of a missing queue closes
	// the channel it ran on.
	Conn *Conn
	// Metrics supplies the messages this process's consumers rejected
	// (stampede_dlq_depth{source="consumer_rejected"}). Default none: 0.
	Metrics *Metrics
	// Group is the writers' consumer group. Default "writers".
	Group string
	// CacheTTL is how long one collection is reused by later scrapes, so
	// that many scrapers (or a fast one) cost one round of queries.
	// Default 1s.
	CacheTTL time.Duration
	// Timeout bounds the queries of one source (Redis, MySQL, RabbitMQ) in
	// one collection; the sources are read in parallel. Default 2s.
	Timeout time.Duration
	// StuckAfter is the age after which a PROCESSING order counts as stuck
	// (stampede_orders_stuck_processing). Default 1m.
	StuckAfter time.Duration
	// Logger receives one warning per failing source and collection.
	// Default slog.Default().
	Logger *slog.Logger
}

func (c *StateConfig) setDefaults() {
	c.Group = cmp.Or(c.Group, "writers")
	c.CacheTTL = cmp.Or(c.CacheTTL, time.Second)
	c.Timeout = cmp.Or(c.Timeout, 2*time.Second)
	c.StuckAfter = cmp.Or(c.StuckAfter, time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// StateCollector is a prometheus.Collector that reads Stampede's shared state
// at scrape time: intake stream backlogs, outbox rows, overdue orders,
// RabbitMQ queue depths and the dead-letter depth. Every instance reports
// the same shared values (aggregate them with max, not sum), except
// dlq_depth{source="consumer_rejected"}, which is per process. A source that
// fails is left out of that scrape and reported by stampede_state_up.
//
// Series (all names carry the stampede_ prefix):
//
//	intake_stream_length_entries{stream}   XLEN: entries still in the stream (acknowledged ones are deleted)
//	intake_pending_entries{stream}         delivered to a writer, not yet acknowledged (pending entries list)
//	intake_lag_entries{stream}             not yet delivered to any writer (consumer-group lag)
//	intake_backlog_entries{stream}         pending + lag: reservations not yet stored in MySQL
//	outbox_rows{status}                    mq_outbox rows per status: NEW, SENDING, SENT, RETRY, DEAD
//	outbox_oldest_unsent_age_seconds       age of the oldest NEW, RETRY or SENDING row (0: none)
//	orders_stuck_processing                PROCESSING orders older than StuckAfter
//	orders_oldest_processing_age_seconds   age of the oldest PROCESSING order (0: none)
//	orders_waiting_pay_overdue             WAITING_PAY orders past their pay deadline
//	rabbitmq_queue_messages_ready{queue}   ready messages per Stampede queue (passive declare)
//	rabbitmq_queue_consumers{queue}        consumers per Stampede queue
//	dlq_depth{source}                      dead-lettered work: intake_dead_stream (entries in the
//	                                       writers' dead streams), outbox_dead (DEAD outbox rows),
//	                                       dlq_queue (messages in stampede.dlq, passive declare),
//	                                       consumer_rejected (messages this process's consumers
//	                                       dead-lettered since it started)
//	state_up{source}                       1 if the last read of redis, mysql, rabbitmq succeeded
type StateCollector struct {
	cfg StateConfig

	streamLen, pending, lag, backlog *prometheus.Desc
	outboxRows, outboxAge            *prometheus.Desc
	stuck, oldest, overdue           *prometheus.Desc
	ready, consumers                 *prometheus.Desc
	dlq, up                          *prometheus.Desc

	mu     sync.Mutex
	at     time.Time
	cached []prometheus.Metric
}

// NewStateCollector returns a StateCollector; register it with the registry
// that serves /metrics.
func NewStateCollector(cfg StateConfig) *StateCollector {
	cfg.setDefaults()
	d := prometheus.NewDesc
	return &StateCollector{
		cfg:        cfg,
		streamLen:  d("stampede_intake_stream_length_entries", "Entries in an intake stream (XLEN); writers delete entries once acknowledged.", []string{"stream"}, nil),
		pending:    d("stampede_intake_pending_entries", "Intake entries delivered to a writer and not yet acknowledged (the consumer group's pending entries).", []string{"stream"}, nil),
		lag:        d("stampede_intake_lag_entries", "Intake entries not yet delivered to any writer (the consumer group's lag).", []string{"stream"}, nil),
		backlog:    d("stampede_intake_backlog_entries", "Reservations of an intake stream not yet stored in MySQL: pending plus lag.", []string{"stream"}, nil),
		outboxRows: d("stampede_outbox_rows", "Rows of the transactional outbox (mq_outbox) by status.", []string{"status"}, nil),
		outboxAge:  d("stampede_outbox_oldest_unsent_age_seconds", "Age of the oldest outbox row not yet confirmed by the broker (NEW, RETRY or SENDING); 0 when there is none.", nil, nil),
		stuck:      d("stampede_orders_stuck_processing", "PROCESSING orders older than the stuck threshold (STAMPEDE_STUCK_AFTER): accepted, stored, not locked.", nil, nil),
		oldest:     d("stampede_orders_oldest_processing_age_seconds", "Age of the oldest PROCESSING order in MySQL; 0 when there is none.", nil, nil),
		overdue:    d("stampede_orders_waiting_pay_overdue", "WAITING_PAY orders whose pay deadline has passed (database clock) and that are not closed yet.", nil, nil),
		ready:      d("stampede_rabbitmq_queue_messages_ready", "Messages ready for delivery in a Stampede queue (passive queue.declare). RabbitMQ does not report unacknowledged messages over AMQP 0-9-1: see stampede_consumer_in_flight_messages.", []string{"queue"}, nil),
		consumers:  d("stampede_rabbitmq_queue_consumers", "Consumers attached to a Stampede queue.", []string{"queue"}, nil),
		dlq:        d("stampede_dlq_depth", "Dead-lettered work by source: intake_dead_stream (entries in the writers' <stream>:dead streams), outbox_dead (DEAD outbox rows), dlq_queue (messages in the dead-letter queue stampede.dlq), consumer_rejected (messages this process's consumers dead-lettered since start).", []string{"source"}, nil),
		up:         d("stampede_state_up", "1 if the last scrape-time read of the source (redis, mysql, rabbitmq) succeeded, else 0.", []string{"source"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.streamLen, c.pending, c.lag, c.backlog, c.outboxRows, c.outboxAge,
		c.stuck, c.oldest, c.overdue, c.ready, c.consumers, c.dlq, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the cached collection if it is
// younger than CacheTTL, else a fresh one.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if c.cached == nil || time.Since(c.at) >= c.cfg.CacheTTL {
		c.cached = c.collect()
		c.at = time.Now()
	}
	cached := c.cached
	c.mu.Unlock()
	for _, m := range cached {
		ch <- m
	}
	var rejected int64
	if c.cfg.Metrics != nil {
		rejected = c.cfg.Metrics.Rejected()
	}
	ch <- prometheus.MustNewConstMetric(c.dlq, prometheus.GaugeValue, float64(rejected), "consumer_rejected")
}

func (c *StateCollector) collect() []prometheus.Metric {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out []prometheus.Metric
	)
	emit := func(ms []prometheus.Metric, source string, err error) {
		up := 1.0
		if err != nil {
			up = 0
			c.cfg.Logger.Warn("metrics: reading state failed", "source", source, "err", err)
		}
		mu.Lock()
		defer mu.Unlock()
		out = append(out, ms...)
		out = append(out, prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, source))
	}
	run := func(source string, fn func(ctx context.Context) ([]prometheus.Metric, error)) {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
			defer cancel()
			ms, err := fn(ctx)
			emit(ms, source, err)
		})
	}
	if c.cfg.Redis != nil {
		run("redis", c.collectRedis)
	}
	if c.cfg.Store != nil {
		run("mysql", c.collectMySQL)
	}
	if c.cfg.Conn != nil {
		run("rabbitmq", c.collectRabbit)
	}
	wg.Wait()
	return out
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// collectRedis reads every intake stream: XLEN, XINFO GROUPS and the XLEN of
// its dead stream, in one pipeline.
func (c *StateCollector) collectRedis(ctx context.Context) ([]prometheus.Metric, error) {
	streams, err := c.cfg.Redis.SMembers(ctx, lua.StreamsKey).Result()
	if err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	type cmds struct {
		length, dead *redis.IntCmd
		groups       *redis.XInfoGroupsCmd
	}
	cs := make([]cmds, len(streams))
	_, err = c.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range streams {
			cs[i] = cmds{length: p.XLen(ctx, s), groups: p.XInfoGroups(ctx, s), dead: p.XLen(ctx, lua.DeadStream(s))}
		}
		return nil
	})
	if err != nil && !isServerError(err) {
		return nil, fmt.Errorf("read streams: %w", err)
	}
	var out []prometheus.Metric
	var dead int64
	for i, s := range streams {
		n, err := cs[i].length.Result()
		if err != nil {
			return nil, fmt.Errorf("xlen %s: %w", s, err)
		}
		var pending, lag int64
		groups, err := cs[i].groups.Result()
		switch {
		case err != nil && !strings.Contains(err.Error(), "no such key"):
			return nil, fmt.Errorf("xinfo groups %s: %w", s, err)
		case err != nil:
			lag = n // no stream yet
		default:
			lag = n // no group yet: nothing was delivered
			for _, g := range groups {
				if g.Name != c.cfg.Group {
					continue
				}
				pending, lag = g.Pending, g.Lag
				if lag < 0 {
					// Unknown after deletions. Writers delete what they
					// acknowledge, so what is left and not pending is lag.
					lag = max(0, n-pending)
				}
			}
		}
		d, err := cs[i].dead.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("xlen %s:dead: %w", s, err)
		}
		dead += d
		out = append(out, gauge(c.streamLen, float64(n), s), gauge(c.pending, float64(pending), s),
			gauge(c.lag, float64(lag), s), gauge(c.backlog, float64(pending+lag), s))
	}
	return append(out, gauge(c.dlq, float64(dead), "intake_dead_stream")), nil
}

// outboxStatuses are reported even when no row has them.
var outboxStatuses = []string{persistence.OutboxNew, persistence.OutboxSending, persistence.OutboxSent,
	persistence.OutboxRetry, persistence.OutboxDead}

func (c *StateCollector) collectMySQL(ctx context.Context) ([]prometheus.Metric, error) {
	counts, age, err := c.cfg.Store.OutboxCounts(ctx)
	if err != nil {
		return nil, err
	}
	b, err := c.cfg.Store.OrderBacklog(ctx, c.cfg.StuckAfter)
	if err != nil {
		return nil, err
	}
	out := make([]prometheus.Metric, 0, len(outboxStatuses)+5)
	for _, st := range outboxStatuses {
		out = append(out, gauge(c.outboxRows, float64(counts[st]), st))
	}
	return append(out,
		gauge(c.outboxAge, age.Seconds()),
		gauge(c.dlq, float64(counts[persistence.OutboxDead]), "outbox_dead"),
		gauge(c.stuck, float64(b.StuckProcessing)),
		gauge(c.oldest, b.OldestProcessing.Seconds()),
		gauge(c.overdue, float64(b.OverdueWaitingPay)),
	), nil
}

// collectRabbit inspects every queue of Topology with a passive declare. A
// missing queue closes the channel; the next queue gets a fresh one.
func (c *StateCollector) collectRabbit(ctx context.Context) ([]prometheus.Metric, error) {
	var out []prometheus.Metric
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			ch.Close()
		}
	}()
	for _, q := range Topology() {
		if ch == nil || ch.IsClosed() {
			var err error
			if ch, err = c.cfg.Conn.Channel(ctx); err != nil {
				return out, err
			}
		}
		info, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
		if err != nil {
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.NotFound {
				continue // not declared yet: no series

			}
			return out, fmt.Errorf("inspect %s: %w", q.Name, err)
		}
		out = append(out, gauge(c.ready, float64(info.Messages), q.Name), gauge(c.consumers, float64(info.Consumers), q.Name))
		if q.Name == QueueDLQ {
			out = append(out, gauge(c.dlq, float64(info.Messages), "dlq_queue"))
		}
	}
	return out, nil
}
