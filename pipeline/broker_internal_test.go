package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// recordLog keeps the messages of a slog logger.
type recordLog struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (r *recordLog) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *recordLog) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recordLog) WithGroup(string) slog.Handler      { return r }

func (r *recordLog) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// Two connections of a process blocked and unblocked: one log line when the
// process becomes blocked, one when the last connection is unblocked;
// Blocked and Ready say so meanwhile and the unblocked channel fires.
func TestBrokerHealthBlockedTransitions(t *testing.T) {
	rec := &recordLog{}
	h := NewBrokerHealth(slog.New(rec), nil)
	_, _, unblocked := h.Blocked()
	h.setBlocked("relay-0#1", "relay-0", true, "low on memory")
	h.setBlocked("relay-1#1", "relay-1", true, "low on memory")
	h.setBlocked("relay-1#1", "relay-1", true, "low on memory") // repeated notice
	if b, reason, _ := h.Blocked(); !b || reason != "low on memory" {
		t.Fatalf("Blocked: %v %q", b, reason)
	}
	if err := h.Ready(); !errors.Is(err, ErrBrokerUnhealthy) || err.Error() != "rabbitmq: broker blocked publishers (low on memory)" {
		t.Fatalf("Ready: %v", err)
	}
	h.setBlocked("relay-0#1", "relay-0", false, "")
	select {
	case <-unblocked:
		t.Fatal("unblocked while relay-1 is still blocked")
	default:
	}
	h.setBlocked("relay-1#1", "relay-1", false, "")
	select {
	case <-unblocked:
	case <-time.After(time.Second):
		t.Fatal("no unblock signal")
	}
	if err := h.Ready(); err != nil {
		t.Fatalf("Ready after the unblock: %v", err)
	}
	if b, u := rec.count("amqp: broker blocked publishers"), rec.count("amqp: broker unblocked publishers"); b != 1 || u != 1 {
		t.Fatalf("log lines: %d blocked, %d unblocked, want one each: %q", b, u, rec.msgs)
	}
}

// Three nacks in a row make a queue unhealthy, an ack clears it.
func TestBrokerHealthNackedQueue(t *testing.T) {
	h := NewBrokerHealth(slog.New(&recordLog{}), nil)
	q := queuesOf("", QueueDLQ)
	h.published(q, false)
	h.published(q, false)
	if err := h.Ready(); err != nil {
		t.Fatalf("two nacks: %v", err)
	}
	h.published(q, false)
	if err := h.Ready(); err == nil || !strings.Contains(err.Error(), "queue "+QueueDLQ+": publishes nacked 3 times in a row") {
		t.Fatalf("three nacks: %v", err)
	}
	h.published(q, true)
	if err := h.Ready(); err != nil {
		t.Fatalf("after an ack: %v", err)
	}
	if got := queuesOf(RetryQueue(2), QueueOrderCreated); len(got) != 1 || got[0] != RetryQueue(2) {
		t.Fatalf("retry exchange routes to %v", got)
	}
}

// While the process is blocked a consumer's republish is not attempted: it
// fails at once without touching the connection (nil here), so no worker
// waits for an alarm to end.
func TestRepublishNotAttemptedWhileBlocked(t *testing.T) {
	h := NewBrokerHealth(slog.New(&recordLog{}), nil)
	h.setBlocked("c#1", "c", true, "low on disk")
	p := &confirmPublisher{conn: nil, health: h, timeout: time.Second}
	err := p.publish(context.Background(), RetryQueue(1), QueueOrderCreated, amqp.Publishing{})
	if !errors.Is(err, errBrokerBlocked) || !strings.Contains(err.Error(), "low on disk") {
		t.Fatalf("publish while blocked: %v", err)
	}
}
