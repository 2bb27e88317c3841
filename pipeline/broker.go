package pipeline

// Broker health of one process (issue 27): RabbitMQ's connection.blocked
// notices (a memory or disk alarm stops every publishing connection) and
// queues whose publishes the broker keeps refusing. The relay and the
// consumers' retry/dead-letter publishers consult it before they publish,
// and readiness (/readyz) reports it.

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// nackedInARow is how many publishes to one queue the broker must refuse in a
// row (nacks, no ack in between) before readiness names the queue.
const nackedInARow = 3

// BrokerHealth is what one process knows about the broker's willingness to
// take its publishes. Share one among every Conn, Relay and Consumer of a
// process (ConnConfig.Health, RelayConfig.Health, ConsumerConfig.Health);
// the zero value is not usable, get one from NewBrokerHealth. Safe for
// concurrent use.
//
// Blocking: RabbitMQ sends connection.blocked to a connection that publishes
// while a resource alarm is on (it then stops reading from that
// connection's socket: every later method on it, a channel open or close
// included, waits for the alarm to end) and connection.unblocked when the
// alarms are over. A connection that does not publish is never told. The
// process counts as blocked while any of its connections is; the first
// block and the last unblock are logged, one line each, with the broker's
// reason.
//
// Queues: a publish the broker nacks counts against each durable queue the
// message was routed to; nackedInARow nacks with no ack in between make the
// queue unhealthy until an ack. A quorum queue that is down (no leader, its
// dead-letter process gone) nacks every publish; AMQP 0-9-1 has no other
// way to tell a client that a queue is down (the management API does).
type BrokerHealth struct {
	log *slog.Logger
	m   *Metrics

	mu      sync.Mutex
	blocked map[string]blockedConn // connection key (name#generation) → its name and the broker's reason
	since   time.Time              // of the first block of the current blocked spell
	changed chan struct{}          // closed and replaced on every unblock
	nacks   map[string]int         // queue → publishes nacked in a row
	consume map[string]string      // queue → last error consuming it, while failing
}

// NewBrokerHealth returns a BrokerHealth logging to log and exporting
// stampede_amqp_blocked and stampede_amqp_queue_unhealthy to m (nil:
// private, unregistered).
func NewBrokerHealth(log *slog.Logger, m *Metrics) *BrokerHealth {
	if log == nil {
		log = slog.Default()
	}
	h := &BrokerHealth{log: log.With("component", "amqp"), m: orNew(m), blocked: map[string]blockedConn{},
		changed: make(chan struct{}), nacks: map[string]int{}, consume: map[string]string{}}
	for _, q := range Topology() { // every series from the start (0), not only after a first problem
		h.m.queueUnhealthy.WithLabelValues(q.Name).Set(0)
	}
	return h
}

// track exports connection name's stampede_amqp_blocked (0 until blocked).
func (h *BrokerHealth) track(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range h.blocked {
		if b.name == name {
			return
		}
	}
	h.m.amqpBlocked.WithLabelValues(name).Set(0)
}

func orNewHealth(h *BrokerHealth, log *slog.Logger, m *Metrics) *BrokerHealth {
	if h == nil {
		return NewBrokerHealth(log, m)
	}
	return h
}

type blockedConn struct{ name, reason string }

// setBlocked records a connection.blocked (active) or connection.unblocked
// notice of the connection key (named name).
func (h *BrokerHealth) setBlocked(key, name string, active bool, reason string) {
	h.update(key, name, active, reason, false)
}

// connEnded records the end of the connection key: it blocks nothing any
// more (a new connection starts unblocked and learns of an alarm that goes
// on with its first publish).
func (h *BrokerHealth) connEnded(key, name string) { h.update(key, name, false, "", true) }

func (h *BrokerHealth) update(key, name string, active bool, reason string, ended bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, was := h.blocked[key]
	switch {
	case active && !was:
		if len(h.blocked) == 0 {
			h.since = time.Now()
			h.log.Warn("amqp: broker blocked publishers; publishing paused until it unblocks", "reason", reason, "connection", name)
		}
		h.blocked[key] = blockedConn{name, reason}
	case !active && was:
		delete(h.blocked, key)
		if len(h.blocked) == 0 {
			msg := "amqp: broker unblocked publishers"
			if ended {
				msg = "amqp: the blocked connection closed; publishing resumes, paused again if the broker still blocks"
			}
			h.log.Warn(msg, "blockedFor", time.Since(h.since).Round(time.Millisecond).String(), "connection", name)
			close(h.changed)
			h.changed = make(chan struct{})
		}
	default:
		return
	}
	n := 0
	for _, b := range h.blocked {
		if b.name == name {
			n++
		}
	}
	h.m.amqpBlocked.WithLabelValues(name).Set(float64(min(n, 1)))
}

// Blocked reports whether a connection of this process is blocked, with the
// broker's reason, and a channel closed when the process is unblocked next.
func (h *BrokerHealth) Blocked() (blocked bool, reason string, unblocked <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range h.blocked {
		return true, b.reason, h.changed
	}
	return false, "", h.changed
}

// connBlocked reports whether connection conn is blocked.
func (h *BrokerHealth) connBlocked(conn string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.blocked[conn]
	return ok
}

// published records the broker's confirm of one publish routed to queues.
func (h *BrokerHealth) published(queues []string, acked bool) {
	if len(queues) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, q := range queues {
		if acked {
			if h.nacks[q] >= nackedInARow {
				h.log.Info("amqp: queue takes publishes again", "queue", q)
			}
			delete(h.nacks, q)
			h.m.queueUnhealthy.WithLabelValues(q).Set(0)
			continue
		}
		h.nacks[q]++
		if h.nacks[q] == nackedInARow {
			h.log.Warn("amqp: broker refuses publishes to queue (nacked in a row); is the queue down?", "queue", q, "nacks", nackedInARow)
			h.m.queueUnhealthy.WithLabelValues(q).Set(1)
		}
	}
}

// consumed records whether consuming queue works (err nil) or failed.
func (h *BrokerHealth) consumed(queue string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.consume, queue)
		return
	}
	h.consume[queue] = err.Error()
}

// Problems lists what is wrong, one line each, e.g. "broker blocked
// publishers (low on memory)", "queue stampede.order.created: publishes
// nacked 3 times in a row". No addresses or credentials: readiness shows
// them as they are.
func (h *BrokerHealth) Problems() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	if len(h.blocked) > 0 {
		reasons := map[string]bool{}
		for _, b := range h.blocked {
			reasons[b.reason] = true
		}
		rs := make([]string, 0, len(reasons))
		for r := range reasons {
			rs = append(rs, r)
		}
		slices.Sort(rs)
		out = append(out, fmt.Sprintf("broker blocked publishers (%s)", strings.Join(rs, "; ")))
	}
	var queues []string
	for q, n := range h.nacks {
		if n >= nackedInARow {
			queues = append(queues, fmt.Sprintf("queue %s: publishes nacked %d times in a row", q, n))
		}
	}
	for q := range h.consume {
		queues = append(queues, fmt.Sprintf("queue %s: cannot consume", q))
	}
	slices.Sort(queues)
	return append(out, queues...)
}

// ErrBrokerUnhealthy is the error of Ready.
var ErrBrokerUnhealthy = errors.New("rabbitmq")

// Ready returns nil, or an error "rabbitmq: <problem>; <problem>" wrapping
// ErrBrokerUnhealthy (see Problems).
func (h *BrokerHealth) Ready() error {
	p := h.Problems()
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrBrokerUnhealthy, strings.Join(p, "; "))
}

// queuesOf returns the durable queues of Stampede's topology a message
// published to exchange with routing key reaches: the queue named by key on
// the default exchange, the queues bound to key on the events exchange, the
// delay queue of a retry exchange.
func queuesOf(exchange, key string) []string {
	if exchange == "" {
		return []string{key}
	}
	if strings.HasPrefix(exchange, retryPrefix) {
		return []string{exchange}
	}
	var out []string
	for _, q := range Topology() {
		if slices.Contains(q.Bindings, key) {
			out = append(out, q.Name)
		}
	}
	return out
}
