package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// Pulse is what the operator console charts, read in one call every few
// seconds: per sale, cumulative counts (the console turns them into orders
// per second by status) and the units split; the pipeline's backlog; and the
// accepted → WAITING_PAY latency of the orders locked in the last window.
// Every figure is read from Redis, MySQL and RabbitMQ, so it is the same
// whichever gateway answers and however many instances of each role run
// (unlike a process's Prometheus counters).
type Pulse struct {
	At     time.Time   `json:"at"`
	Sales  []SalePulse `json:"sales"`
	Intake int64       `json:"intakeBacklog"` // Σ of the sales' intake backlogs
	// OutboxUnsent is the outbox rows not yet confirmed by the broker (NEW,
	// RETRY, SENDING), of the whole table; OutboxOldestMs the age of the
	// oldest of them.
	OutboxUnsent   int64 `json:"outboxUnsent"`
	OutboxOldestMs int64 `json:"outboxOldestMs"`
	// Queues are the ready messages of Stampede's work queues and of the
	// dead-letter queue, by queue name (absent when RabbitMQ is unreachable).
	Queues  map[string]int `json:"queues,omitempty"`
	Latency LatencySummary `json:"latency"`
	Errors  []string       `json:"errors,omitempty"` // parts that could not be read
}

// SalePulse is one sale's reading.
type SalePulse struct {
	ProductID int64 `json:"productId"`
	// Accepted is every reservation the gateway accepted: orders written plus
	// intake entries not yet written (IntakeBacklog).
	Accepted      int64                  `json:"accepted"`
	IntakeBacklog int64                  `json:"intakeBacklog"`
	Orders        map[order.Status]int64 `json:"orders"`       // orders per status now
	LockedOrders  int64                  `json:"lockedOrders"` // orders that ever reached WAITING_PAY (LOCK flows)
	// Units: sold (PAID) and locked (WAITING_PAY) from MySQL, available from
	// Redis; Units is MySQL's available + locked + sold (total + ADJUST).
	Sold      int64 `json:"sold"`
	Locked    int64 `json:"locked"`
	Available int64 `json:"available"`
	Units     int64 `json:"units"`
}

// LatencySummary is the accepted → WAITING_PAY time of the orders locked
// within WindowSeconds (at most maxLatencySamples of them, the newest).
type LatencySummary struct {
	WindowSeconds float64 `json:"windowSeconds"`
	Samples       int     `json:"samples"`
	P50Ms         float64 `json:"p50Ms"`
	P95Ms         float64 `json:"p95Ms"`
	MaxMs         float64 `json:"maxMs"`
}

const maxLatencySamples = 5000

// PulseConfig says what to read.
type PulseConfig struct {
	Products   []persistence.Product // the sales to read (their ids and shards)
	PayTimeout time.Duration         // the consumers' pay timeout: lock time = pay_deadline − PayTimeout
	Window     time.Duration         // latency window
}

// ReadPulse reads a Pulse. A part that fails (RabbitMQ down) is left out and
// named in Errors; only a MySQL failure of the sale counts fails the call.
func ReadPulse(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, conn *Conn, cfg PulseConfig) (Pulse, error) {
	p := Pulse{At: time.Now().UTC(), Sales: []SalePulse{}, Latency: LatencySummary{WindowSeconds: cfg.Window.Seconds()}}
	ids := make([]int64, len(cfg.Products))
	for i, pr := range cfg.Products {
		ids[i] = pr.ID
	}
	counts, err := store.CountSales(ctx, ids)
	if err != nil {
		return p, fmt.Errorf("pulse: %w", err)
	}
	for i, pr := range cfg.Products {
		c := counts[i]
		sp := SalePulse{ProductID: pr.ID, Orders: c.Orders, LockedOrders: c.Locked, Sold: c.Stock.Sold, Locked: c.Stock.Locked,
			Units: c.Stock.Available + c.Stock.Locked + c.Stock.Sold}
		for _, n := range c.Orders {
			sp.Accepted += n
		}
		for shard := range max(pr.Shards, 1) {
			k := lua.ShardKeys(pr.ID, shard)
			a, err := rdb.HGet(ctx, k.Stock(), "available").Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				p.Errors = append(p.Errors, fmt.Sprintf("redis available of %d/%d: %v", pr.ID, shard, err))
			}
			sp.Available += a
			b, err := intakeBacklog(ctx, rdb, k.Intake())
			if err != nil {
				p.Errors = append(p.Errors, err.Error())
			}
			sp.IntakeBacklog += b
		}
		sp.Accepted += sp.IntakeBacklog
		p.Intake += sp.IntakeBacklog
		p.Sales = append(p.Sales, sp)
	}
	if out, oldest, err := store.OutboxCounts(ctx); err != nil {
		p.Errors = append(p.Errors, err.Error())
	} else {
		p.OutboxUnsent = out[persistence.OutboxNew] + out[persistence.OutboxRetry] + out[persistence.OutboxSending]
		p.OutboxOldestMs = oldest.Milliseconds()
	}
	if lat, err := store.LockLatencies(ctx, p.At.Add(-cfg.Window), cfg.PayTimeout, maxLatencySamples); err != nil {
		p.Errors = append(p.Errors, err.Error())
	} else {
		p.Latency = summarize(lat, cfg.Window)
	}
	if conn != nil {
		if q, err := queueDepths(ctx, conn); err != nil {
			p.Errors = append(p.Errors, err.Error())
		} else {
			p.Queues = q
		}
	}
	return p, nil
}

// summarize is the percentiles of ds (nearest rank).
func summarize(ds []time.Duration, window time.Duration) LatencySummary {
	s := LatencySummary{WindowSeconds: window.Seconds(), Samples: len(ds)}
	if len(ds) == 0 {
		return s
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	rank := func(q float64) time.Duration { return ds[min(len(ds)-1, max(0, int(q*float64(len(ds))+0.999999)-1))] }
	s.P50Ms, s.P95Ms, s.MaxMs = ms(rank(0.50)), ms(rank(0.95)), ms(ds[len(ds)-1])
	return s
}

// pulseQueues are the queues whose depth the console shows.
var pulseQueues = []string{QueueOrderCreated, QueueStockRelease, QueueOrderClose, QueueDLQ}

// queueDepths reads the ready messages of pulseQueues (a passive declare
// each; a queue that does not exist yet counts 0).
func queueDepths(ctx context.Context, conn *Conn) (map[string]int, error) {
	out := make(map[string]int, len(pulseQueues))
	for _, name := range pulseQueues {
		ch, err := conn.Channel(ctx)
		if err != nil {
			return nil, fmt.Errorf("pulse: queues: %w", err)
		}
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		ch.Close() // a failed passive declare closes the channel: one per queue
		if err != nil {
			out[name] = 0
			continue
		}
		out[name] = q.Messages
	}
	return out, nil
}
