package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Retry and dead-letter topology of the consumers (docs/spec.md §1 "consumer",
// §6 "poison message").
//
// A message whose handling failed with a transient error (MySQL unavailable,
// deadlock 1213, lock wait timeout 1205, Redis errors, an open circuit
// breaker) is republished to the delay queue of its attempt,
// RetryQueue(level): a durable queue with a fixed x-message-ttl and
// x-dead-letter-exchange "" (the default exchange) and no dead-letter routing
// key, so when its TTL runs out RabbitMQ routes it back by its own routing
// key, which is the name of the work queue it came from. Each delay queue is
// bound to a fanout exchange of the same name, which the consumer publishes
// to with routing key = the work queue. Every queue of a level holds messages
// of one TTL, so expiry is FIFO (per-message TTLs in one queue would wait for
// the head).
//
// The republished copy carries HeaderAttempt = the number of its next
// delivery; the original is acked only after the broker confirmed the copy.
// After ConsumerConfig.MaxAttempts deliveries, or at once for a poison
// message (undecodable body, unknown event type, invalid payload), the
// message goes to QueueDLQ with the Header* headers saying why, and the
// original is acked. Nothing is ever nack-requeued in a loop: a consumer
// whose publish channel is broken waits its backoff before it requeues.
//
// With quorum queues (TopologyConfig) RabbitMQ enforces the same budget on
// deliveries that never come back at all: a message whose consumers die
// holding it (a crash mid-handling, again and again) is dead-lettered by the
// broker to QueueDLQ after DeliveryLimit(MaxAttempts)+1 deliveries, with
// x-death reason "delivery_limit" instead of the Header* headers.
const (
	// QueueDLQ is the durable dead-letter queue. Nothing consumes it; see
	// InspectDLQ and ReplayDLQ.
	QueueDLQ = "stampede.dlq"
	// retryPrefix + level names a delay queue and its fanout exchange.
	retryPrefix = "stampede.retry."

	// HeaderAttempt is the delivery attempt (1 for the first delivery,
	// which carries no header) of a message coming back from a delay queue.
	HeaderAttempt = "x-stampede-attempt"
	// Headers of a dead-lettered message.
	HeaderQueue      = "x-stampede-queue"       // the work queue it was consumed from
	HeaderHandler    = "x-stampede-handler"     // the handler (ConsumerOrderLock, …)
	HeaderReason     = "x-stampede-reason"      // the last error, at most 500 bytes
	HeaderAttempts   = "x-stampede-attempts"    // deliveries made
	HeaderRoutingKey = "x-stampede-routing-key" // its original routing key (also carried through the delay queues)
	HeaderDeadAt     = "x-stampede-dead-at"     // RFC 3339 time it was dead-lettered
)

// retryDelays are the TTLs of the delay queues: the message that failed its
// n-th delivery waits retryDelays[min(n, len)-1] before its next one. They
// are part of the queues' declarations, so changing one needs new queue
// names (PRECONDITION_FAILED otherwise).
var retryDelays = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second}

// RetryDelays returns the delay before each retry: element n-1 after the
// n-th failed delivery; the last one repeats.
func RetryDelays() []time.Duration { return append([]time.Duration(nil), retryDelays...) }

// RetryQueue is the name of the delay queue (and of its fanout exchange) of
// level 1…len(RetryDelays()).
func RetryQueue(level int) string { return retryPrefix + strconv.Itoa(level) }

// retryQueues returns the delay queues of queue type qt. Quorum ones
// dead-letter at least once: an expired message leaves its delay queue only
// after the work queue confirmed it.
func retryQueues(qt QueueType) []QueueSpec {
	out := make([]QueueSpec, len(retryDelays))
	for i, d := range retryDelays {
		args := amqp.Table{"x-dead-letter-exchange": ""}
		if qt == QueueQuorum {
			args = quorumArgs(true, "", "")
		}
		args["x-message-ttl"] = d.Milliseconds()
		out[i] = QueueSpec{Name: RetryQueue(i + 1), Args: args}
	}
	return out
}

// declareRetryExchanges declares the delay queues' fanout exchanges and binds
// each queue to its own (the queues themselves are in Topology).
func declareRetryExchanges(ch *amqp.Channel) error {
	for i := range retryDelays {
		name := RetryQueue(i + 1)
		if err := ch.ExchangeDeclare(name, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return fmt.Errorf("topology: declare exchange %s: %w", name, err)
		}
		if err := ch.QueueBind(name, "", name, false, nil); err != nil {
			return fmt.Errorf("topology: bind %s: %w", name, err)
		}
	}
	return nil
}

// retryLevel is the delay queue level for a message whose attempt-th
// delivery failed.
func retryLevel(attempt int) int { return min(max(attempt, 1), len(retryDelays)) }

// attemptOf reads HeaderAttempt (1 when absent or malformed).
func attemptOf(h amqp.Table) int {
	switch v := h[HeaderAttempt].(type) {
	case int:
		return max(v, 1)
	case int8:
		return max(int(v), 1)
	case int16:
		return max(int(v), 1)
	case int32:
		return max(int(v), 1)
	case int64:
		return max(int(v), 1)
	case uint8:
		return max(int(v), 1)
	case uint16:
		return max(int(v), 1)
	case uint32:
		return max(int(v), 1)
	case string:
		if n, err := strconv.Atoi(v); err == nil {
			return max(n, 1)
		}
	}
	return 1
}

// intHeader reads an integer header (0 when absent).
func intHeader(h amqp.Table, key string) int {
	if _, ok := h[key]; !ok {
		return 0
	}
	return attemptOf(amqp.Table{HeaderAttempt: h[key]})
}

func strHeader(h amqp.Table, key string) string {
	s, _ := h[key].(string)
	return s
}

// republish copies d into a new publishing with headers extra (x-death,
// the quorum queues' x-delivery-count and the attempt header dropped from
// the original ones).
func republish(d amqp.Delivery, extra amqp.Table) amqp.Publishing {
	h := amqp.Table{}
	for k, v := range d.Headers {
		if k == "x-death" || k == "x-delivery-count" || k == "x-first-death-exchange" || k == "x-first-death-queue" ||
			k == "x-first-death-reason" || k == "x-last-death-exchange" || k == "x-last-death-queue" ||
			k == "x-last-death-reason" || k == HeaderAttempt {
			continue
		}
		h[k] = v
	}
	for k, v := range extra {
		h[k] = v
	}
	return amqp.Publishing{
		Headers:      h,
		ContentType:  d.ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    d.MessageId,
		Type:         d.Type,
		AppId:        d.AppId,
		Timestamp:    d.Timestamp,
		Body:         d.Body,
	}
}

// errPublishNacked is a republish the broker nacked.
var errPublishNacked = errors.New("consumer: republish nacked by broker")

// errBrokerBlocked is a republish not attempted: the broker blocks
// publishers (BrokerHealth.Blocked), so it would wait for the alarm to end.
var errBrokerBlocked = errors.New("consumer: broker blocks publishers")

// confirmPublisher publishes one handler's retries and dead letters on a
// confirm-mode channel of the consumer's publish connection, shared by the
// handler's workers and opened on first use. It never waits on a broker that
// blocks publishers: while the process is blocked it fails at once
// (errBrokerBlocked), and a channel given up after a nack or a timeout is
// closed in the background (closeChannel).
type confirmPublisher struct {
	conn    *Conn
	health  *BrokerHealth
	timeout time.Duration

	mu sync.Mutex
	ch *amqp.Channel
}

// publish sends msg and waits for its confirm (at most timeout).
func (p *confirmPublisher) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	if blocked, reason, _ := p.health.Blocked(); blocked {
		return fmt.Errorf("%w (%s)", errBrokerBlocked, reason)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	ch, err := p.channel(pctx)
	if err != nil {
		return fmt.Errorf("consumer: republish channel: %w", err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(pctx, exchange, key, false, false, msg)
	if err != nil {
		p.drop(ch)
		return fmt.Errorf("consumer: republish to %q/%s: %w", exchange, key, err)
	}
	ok, err := dc.WaitContext(pctx)
	if err != nil {
		p.drop(ch) // late confirms are of no use; a blocked broker would not answer a close
		return fmt.Errorf("consumer: confirm of republish to %q/%s: %w", exchange, key, err)
	}
	p.health.published(queuesOf(exchange, key), ok)
	if !ok {
		// A nack can mean the channel lost a quorum queue's leader: RabbitMQ
		// 3.10 goes on nacking that channel's publishes after a new leader
		// is elected (see Relay.awaitConfirms); the next publish opens a
		// new channel.
		p.drop(ch)
		return errPublishNacked
	}
	return nil
}

// channel returns the open channel, opening one (confirm mode) if needed.
func (p *confirmPublisher) channel(ctx context.Context) (*amqp.Channel, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	ch, err := p.conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		closeChannel(ch, 0)
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	p.ch = ch
	return ch, nil
}

// drop gives ch up (if still the current channel) without waiting for the
// broker.
func (p *confirmPublisher) drop(ch *amqp.Channel) {
	p.mu.Lock()
	if p.ch == ch {
		p.ch = nil
	}
	p.mu.Unlock()
	closeChannel(ch, 0)
}

// close closes the channel, waiting at most closeWait.
func (p *confirmPublisher) close() {
	p.mu.Lock()
	ch := p.ch
	p.ch = nil
	p.mu.Unlock()
	if ch != nil {
		closeChannel(ch, closeWait)
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// retryLater republishes d, whose handling failed transiently, to the delay
// queue of its attempt (an outage: the outage level, without spending the
// attempt) and acks the original once the broker confirmed the copy. An
// error: the republish failed and d is neither moved nor acked.
func (c *Consumer) retryLater(ctx context.Context, h handler, d amqp.Delivery, attempt int, outage bool,
	routingKey string, pub *confirmPublisher) error {
	level, next := retryLevel(attempt), attempt+1
	if outage {
		level, next = outageRetryLevel, attempt
	}
	if err := pub.publish(ctx, RetryQueue(level), h.queue, republish(d, amqp.Table{HeaderAttempt: int32(next), HeaderRoutingKey: routingKey})); err != nil {
		return err
	}
	_ = d.Ack(false)
	return nil
}
