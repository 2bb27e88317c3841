package pipeline_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// appendOutbox commits n ORDER_CREATED-like outbox rows with event ids
// "<prefix>:<i>".
func (e *env) appendOutbox(prefix string, n int, exchange, key string) []string {
	e.t.Helper()
	ids := make([]string, n)
	msgs := make([]persistence.OutboxMessage, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s:%d", prefix, i)
		msgs[i] = persistence.OutboxMessage{EventID: ids[i], EventType: order.EventCreated, OrderNo: "1",
			Exchange: exchange, RoutingKey: key, Payload: []byte(`{"eventId":"` + ids[i] + `"}`)}
	}
	err := e.store.WithTx(context.Background(), func(tx *sql.Tx) error {
		_, err := persistence.AppendOutbox(context.Background(), tx, msgs...)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// drain takes every ready message off queue and counts them by MessageId.
func drain(t *testing.T, url, queue string) map[string]int {
	t.Helper()
	ch := pipelinetest.Channel(t, url)
	got := map[string]int{}
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return got
		}
		if d.ContentType != "application/json" || d.DeliveryMode != amqp.Persistent || d.Type != string(order.EventCreated) {
			t.Fatalf("message properties %+v", d)
		}
		got[d.MessageId]++
	}
}

func TestRelaysPublishEveryRowConcurrently(t *testing.T) {
	e := newEnv(t)
	ids := e.appendOutbox("ev", 1000, order.EventsExchange, order.RouteCreated)
	var relays []*pipeline.Relay
	for i := range 3 {
		r := e.relay(pipeline.RelayConfig{Owner: fmt.Sprintf("relay-%d", i), BatchSize: 50})
		relays = append(relays, r)
		run(t, fmt.Sprintf("relay %d", i), r.Run)
	}
	e.waitCount(20*time.Second, 1000, `SELECT COUNT(*) FROM mq_outbox WHERE status = 'SENT'`)
	// A relay counts its rows just after MarkSent committed them.
	pipelinetest.WaitFor(t, 5*time.Second, "relay stats", func() (bool, string) {
		var n int64
		for _, r := range relays {
			n += e.relayStats(r).Sent
		}
		return n == 1000, fmt.Sprintf("%d sent", n)
	})
	var sent int64
	working := 0
	for _, r := range relays {
		st := e.relayStats(r)
		sent += st.Sent
		if st.Sent > 0 {
			working++
		}
		if st.Failed != 0 {
			t.Errorf("relay stats %+v", st)
		}
	}
	if sent != 1000 {
		t.Errorf("relays marked %d rows SENT, want 1000", sent)
	}
	if working < 2 {
		t.Logf("only %d of 3 relays got work", working)
	}
	got := drain(t, e.amqpURL, pipeline.QueueOrderCreated)
	for _, id := range ids {
		if got[id] < 1 {
			t.Fatalf("event %s never published", id)
		}
	}
	if len(got) != 1000 {
		t.Errorf("%d distinct events in the queue, want 1000", len(got))
	}
}

func TestRelayRetriesReturnedAndKeepsBroadcasts(t *testing.T) {
	e := newEnv(t)
	// No queue by that name: the default exchange returns the mandatory
	// publish, so the row must not be SENT.
	e.appendOutbox("lost", 1, "", "stampede.no.such.queue")
	// A WAITING_PAY status change is a broadcast: nobody listening is fine.
	e.appendOutbox("bcast", 1, order.EventsExchange, order.RouteStatus(order.WaitingPay))
	r := e.relay(pipeline.RelayConfig{MaxRetries: 3, RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond})
	run(t, "relay", r.Run)
	e.waitCount(10*time.Second, 1, `SELECT COUNT(*) FROM mq_outbox WHERE event_id = 'lost:0' AND status = 'DEAD' AND retry_count = 3 AND last_error LIKE 'returned%'`)
	e.waitCount(10*time.Second, 1, `SELECT COUNT(*) FROM mq_outbox WHERE event_id = 'bcast:0' AND status = 'SENT'`)
	// The relay counts a failure just after MarkRetry committed it.
	pipelinetest.WaitFor(t, 5*time.Second, "relay stats", func() (bool, string) {
		st := e.relayStats(r)
		return st.Returned == 3 && st.Failed == 3 && st.Sent == 1, fmt.Sprintf("stats %+v", st)
	})
}

// A nacked publish drops the relay's channel; the next batch goes out on a
// new one (issue 13: after a quorum queue's leader died, RabbitMQ 3.10 goes
// on nacking the channel that published meanwhile; a new channel is acked).
// A full queue with x-overflow reject-publish makes the broker nack here.
func TestRelayReopensChannelAfterNack(t *testing.T) {
	e := newEnv(t)
	const full = "stampede.test.full"
	ch := pipelinetest.Channel(t, e.amqpURL)
	if _, err := ch.QueueDeclare(full, false, false, false, false, amqp.Table{"x-max-length": int64(0), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.QueueDelete(full, false, false, false) })
	e.appendOutbox("full", 1, "", full)
	r := e.relay(pipeline.RelayConfig{MaxRetries: 3, RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond})
	run(t, "relay", r.Run)
	e.waitCount(10*time.Second, 1, `SELECT COUNT(*) FROM mq_outbox WHERE event_id = 'full:0' AND status = 'DEAD' AND retry_count = 3 AND last_error LIKE 'nacked%'`)
	// Three nacked batches: the channel of each was dropped, so three opens
	// after the first (the last may still be opening when the row is DEAD).
	pipelinetest.WaitFor(t, 5*time.Second, "channel reopened after every nack", func() (bool, string) {
		st := e.relayStats(r)
		return st.Reconnect >= 2, fmt.Sprintf("stats %+v", st)
	})
}

// A relay that dies after the broker confirmed but before marking SENT: the
// rows stay SENDING until the lease ends, then another relay sends them again.
func TestRelayDeathAfterConfirmResendsAfterLease(t *testing.T) {
	e := newEnv(t)
	ids := e.appendOutbox("twice", 10, order.EventsExchange, order.RouteCreated)
	errDied := errors.New("killed after confirm")
	var confirmed atomic.Int64
	dying := e.relay(pipeline.RelayConfig{Lease: time.Second, ConfirmTimeout: 400 * time.Millisecond})
	dying.TestSignals.AfterConfirm = func(acked []int64) error { confirmed.Add(int64(len(acked))); return errDied }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dying.Run(ctx); !errors.Is(err, errDied) {
		t.Fatalf("Run returned %v, want the AfterConfirm error", err)
	}
	if confirmed.Load() != 10 {
		t.Fatalf("%d confirmed before the death, want 10", confirmed.Load())
	}
	if n := e.count(`SELECT COUNT(*) FROM mq_outbox WHERE status = 'SENDING'`); n != 10 {
		t.Fatalf("%d rows SENDING after the death, want 10", n)
	}
	start := time.Now()
	r := e.relay(pipeline.RelayConfig{Lease: time.Second, ConfirmTimeout: 400 * time.Millisecond})
	run(t, "relay", r.Run)
	e.waitCount(10*time.Second, 10, `SELECT COUNT(*) FROM mq_outbox WHERE status = 'SENT'`)
	if time.Since(start) < 500*time.Millisecond {
		t.Errorf("rows re-sent after %v, before their lease ended", time.Since(start))
	}
	got := drain(t, e.amqpURL, pipeline.QueueOrderCreated)
	for _, id := range ids {
		if got[id] != 2 {
			t.Errorf("event %s published %d times, want 2 (at least once, resent after the lease)", id, got[id])
		}
	}
}

func TestTopologyQueues(t *testing.T) {
	e := newEnv(t)
	c := e.conn()
	ch, err := c.Channel(context.Background()) // dials and declares
	if err != nil {
		t.Fatal(err)
	}
	ch.Close()
	for _, q := range pipeline.Topology() {
		if n := pipelinetest.QueueDepth(t, e.amqpURL, q.Name); n != 0 {
			t.Errorf("queue %s has %d messages", q.Name, n)
		}
	}
	if !strings.HasPrefix(pipeline.QueuePayTimeoutDelay, "stampede.") {
		t.Errorf("delay queue %q", pipeline.QueuePayTimeoutDelay)
	}
}

// A queue that refuses every publish (here: a policy of length 1 with
// reject-publish, the queue full after the first; in production a quorum queue that is down, such as
// RabbitMQ 3.10's quorum queues with at-least-once dead-lettering when
// their dead-letter supervisor failed) makes the relay's broker health name
// the queue, which /readyz shows (gateway and metrics listener); the rows
// go RETRY, and once the queue takes publishes again they are SENT and the
// health is clear. Before, readiness never saw it.
func TestQueueRefusingPublishesIsNamedByReadiness(t *testing.T) {
	e := newEnv(t)
	clear := pipelinetest.Policy(t, "pipeline", "refuse-created", "^"+pipeline.QueueOrderCreated+"$",
		`{"max-length":1,"overflow":"reject-publish"}`)
	conn := e.conn()
	r, err := pipeline.NewRelay(e.store, conn, pipeline.RelayConfig{PollInterval: 10 * time.Millisecond, BatchSize: 5,
		RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 100 * time.Millisecond, MaxRetries: 100})
	if err != nil {
		t.Fatal(err)
	}
	run(t, "relay", r.Run)
	e.appendOutbox("refused", 10, order.EventsExchange, order.RouteCreated)
	want := "queue " + pipeline.QueueOrderCreated + ": publishes nacked"
	pipelinetest.WaitFor(t, 20*time.Second, "readiness naming the queue", func() (bool, string) {
		err := conn.Health().Ready()
		return err != nil && strings.Contains(err.Error(), want), fmt.Sprint(err)
	})
	t.Logf("while refused: %v", conn.Health().Ready())
	clear()
	e.waitCount(30*time.Second, 10, `SELECT COUNT(*) FROM mq_outbox WHERE status = 'SENT'`)
	pipelinetest.WaitFor(t, 5*time.Second, "readiness clear", func() (bool, string) {
		err := conn.Health().Ready()
		return err == nil, fmt.Sprint(err)
	})
}
