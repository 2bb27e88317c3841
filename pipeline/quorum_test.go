package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// declareWith dials url with a Conn declaring topo and returns the error of
// its first Channel (nil when the topology was declared).
func declareWith(t *testing.T, url string, topo pipeline.TopologyConfig) error {
	t.Helper()
	c, err := pipeline.NewConn(pipeline.ConnConfig{URL: url, Topology: topo, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := c.Channel(ctx)
	if err == nil {
		ch.Close()
	}
	return err
}

// rawChannel opens a plain channel on url, closed at cleanup.
func rawChannel(t *testing.T, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestQuorumTopologyIsQuorum: every durable queue declared with the quorum
// topology really is a quorum queue: redeclaring it as the classic topology
// declares it fails with PRECONDITION_FAILED, while redeclaring it with its
// own arguments (or with only x-queue-type quorum changed) is refused only
// by the other arguments.
func TestQuorumTopologyIsQuorum(t *testing.T) {
	url := pipelinetest.Vhost(t, "pipeline")
	quorum := pipeline.TopologyConfig{QueueType: pipeline.QueueQuorum}
	if err := declareWith(t, url, quorum); err != nil {
		t.Fatal(err)
	}
	classic := pipeline.TopologyConfig{QueueType: pipeline.QueueClassic}.Queues()
	for i, q := range quorum.Queues() {
		if q.Args["x-queue-type"] != "quorum" {
			t.Errorf("queue %s args %v", q.Name, q.Args)
		}
		// Idempotent with its own arguments.
		if _, err := rawChannel(t, url).QueueDeclare(q.Name, true, false, false, false, q.Args); err != nil {
			t.Errorf("redeclare %s as quorum: %v", q.Name, err)
		}
		// Refused with the classic ones.
		_, err := rawChannel(t, url).QueueDeclare(q.Name, true, false, false, false, classic[i].Args)
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			t.Errorf("redeclare %s as classic: %v, want PRECONDITION_FAILED", q.Name, err)
		}
		// Only the type differs: the broker names x-queue-type.
		args := amqp.Table{}
		for k, v := range q.Args {
			args[k] = v
		}
		args["x-queue-type"] = "classic"
		_, err = rawChannel(t, url).QueueDeclare(q.Name, true, false, false, false, args)
		if err == nil || !strings.Contains(err.Error(), "'x-queue-type'") || !strings.Contains(err.Error(), "'quorum'") {
			t.Errorf("redeclare %s with x-queue-type classic: %v", q.Name, err)
		}
	}
	want := map[string]any{"x-delivery-limit": int64(4), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": pipeline.QueueDLQ,
		"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
	for _, q := range quorum.Queues() {
		switch {
		case q.Name == pipeline.QueueOrderCreated || q.Name == pipeline.QueueStockRelease || q.Name == pipeline.QueueOrderClose:
			for k, v := range want {
				if q.Args[k] != v {
					t.Errorf("work queue %s: %s = %v, want %v", q.Name, k, q.Args[k], v)
				}
			}
		case q.Name == pipeline.QueuePayTimeoutDelay || strings.HasPrefix(q.Name, "stampede.retry."):
			if q.Args["x-dead-letter-strategy"] != "at-least-once" || q.Args["x-overflow"] != "reject-publish" {
				t.Errorf("delay queue %s args %v", q.Name, q.Args)
			}
		}
	}
}

// TestQueueTypeMismatchError: a vhost holding the other type of queues makes
// the Conn fail at once with a *QueueMismatchError that names the queue, the
// type it has, the type configured and what to do.
func TestQueueTypeMismatchError(t *testing.T) {
	for _, tc := range []struct{ existing, configured pipeline.QueueType }{
		{pipeline.QueueClassic, pipeline.QueueQuorum}, // "/" with classic queues from earlier runs
		{pipeline.QueueQuorum, pipeline.QueueClassic},
	} {
		t.Run(string(tc.existing)+"-exists", func(t *testing.T) {
			url := pipelinetest.Vhost(t, "pipeline")
			if err := declareWith(t, url, pipeline.TopologyConfig{QueueType: tc.existing}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err := declareWith(t, url, pipeline.TopologyConfig{QueueType: tc.configured})
			var mm *pipeline.QueueMismatchError
			if !errors.As(err, &mm) {
				t.Fatalf("declare %s over %s: %v, want a QueueMismatchError", tc.configured, tc.existing, err)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("took %v: a mismatch must not be retried", time.Since(start))
			}
			if mm.Queue != pipeline.QueueOrderCreated || mm.Existing != tc.existing || mm.Configured != tc.configured {
				t.Errorf("error %+v", mm)
			}
			msg := err.Error()
			t.Logf("%s", msg)
			for _, s := range []string{"queue " + pipeline.QueueOrderCreated + " in vhost " + pipelinetest.VhostName(t, "pipeline"), "already exists as a " + string(tc.existing) + " queue",
				"configured queue type is " + string(tc.configured), "STAMPEDE_AMQP_QUEUE_TYPE=" + string(tc.existing),
				"rabbitmqctl delete_queue -p " + pipelinetest.VhostName(t, "pipeline") + " " + pipeline.QueueOrderCreated, "PRECONDITION_FAILED"} {
				if !strings.Contains(msg, s) {
					t.Errorf("message lacks %q: %s", s, msg)
				}
			}
		})
	}
	t.Run("delivery-limit", func(t *testing.T) {
		url := pipelinetest.Vhost(t, "pipeline")
		if err := declareWith(t, url, pipeline.TopologyConfig{QueueType: pipeline.QueueQuorum, MaxAttempts: 5}); err != nil {
			t.Fatal(err)
		}
		err := declareWith(t, url, pipeline.TopologyConfig{QueueType: pipeline.QueueQuorum, MaxAttempts: 7})
		var mm *pipeline.QueueMismatchError
		if !errors.As(err, &mm) || mm.Arg != "x-delivery-limit" || mm.Existing != "" && mm.Existing != pipeline.QueueQuorum {
			t.Fatalf("%+v %v", mm, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "STAMPEDE_CONSUMER_MAX_ATTEMPTS back to 5") || !strings.Contains(msg, "declared '6', queue has '4'") {
			t.Errorf("message: %s", msg)
		}
	})
}

// dieHolding takes one message of queue on a fresh connection, without
// acknowledging it, and drops the connection: a consumer that crashes
// mid-handling. It returns the delivery, or ok=false if none came within 3s.
func dieHolding(t *testing.T, url, queue string) (d amqp.Delivery, ok bool) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "dying", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d = <-ds:
		return d, true
	case <-time.After(3 * time.Second):
		return d, false
	}
}

// TestDeliveryLimitDeadLettersCrashLoop: with quorum queues, a message whose
// consumers die holding it, again and again, is delivered MaxAttempts times
// and then dead-lettered by RabbitMQ to stampede.dlq instead of looping;
// stampede dlq list shows why.
func TestDeliveryLimitDeadLettersCrashLoop(t *testing.T) {
	e := newEnvType(t, pipeline.QueueQuorum)
	const maxAttempts = 3
	topo := pipeline.TopologyConfig{QueueType: pipeline.QueueQuorum, MaxAttempts: maxAttempts}
	if err := declareWith(t, e.amqpURL, topo); err != nil {
		t.Fatal(err)
	}
	ch := rawChannel(t, e.amqpURL)
	if err := ch.PublishWithContext(context.Background(), order.EventsExchange, order.RouteCreated, true, false,
		amqp.Publishing{MessageId: "crasher", Type: string(order.EventCreated), DeliveryMode: amqp.Persistent, Body: []byte(`{"eventId":"crasher"}`)}); err != nil {
		t.Fatal(err)
	}
	var counts []any
	for range maxAttempts + 2 {
		d, ok := dieHolding(t, e.amqpURL, pipeline.QueueOrderCreated)
		if !ok {
			break
		}
		counts = append(counts, d.Headers["x-delivery-count"])
	}
	if len(counts) != maxAttempts {
		t.Errorf("delivered %d times (x-delivery-count %v), want %d", len(counts), counts, maxAttempts)
	}
	pipelinetest.WaitFor(t, 5*time.Second, "crash-looping message in the DLQ", func() (bool, string) {
		n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueDLQ)
		return n == 1, fmt.Sprintf("dlq depth %d", n)
	})
	c, err := pipeline.NewConn(pipeline.ConnConfig{URL: e.amqpURL, Topology: topo})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rep, err := pipeline.InspectDLQ(context.Background(), c, e.store, 10)
	if err != nil || len(rep.Messages) != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	m := rep.Messages[0]
	if m.EventID != "crasher" || m.Queue != pipeline.QueueOrderCreated || m.Handler != pipeline.ConsumerOrderLock ||
		!strings.Contains(m.Reason, "delivery_limit") || m.RoutingKey != order.RouteCreated || m.DeadAt == "" {
		t.Errorf("dlq message %+v", m)
	}
	if n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueOrderCreated); n != 0 {
		t.Errorf("%d messages left in the work queue", n)
	}
}

// TestDeliveryLimitSparesOrdinaryRetries: a good order's message that was
// already held by crashing consumers up to the limit, then fails twice more
// with transient errors (ordinary retries through the delay queues), is
// applied on its last attempt and never dead-lettered: each retry is a new
// message with a fresh delivery count.
func TestDeliveryLimitSparesOrdinaryRetries(t *testing.T) {
	e := newEnvType(t, pipeline.QueueQuorum)
	const maxAttempts = 3
	e.maxAttempts = maxAttempts
	e.declare()
	p, k := e.product(10, 10)
	w := e.writer(pipeline.WriterConfig{BatchWait: 5 * time.Millisecond})
	run(t, "writer", w.Run)
	r := e.relay(pipeline.RelayConfig{})
	run(t, "relay", r.Run)
	no := e.reserve(p, k, 1, 1, 1)[0]
	pipelinetest.WaitFor(t, 10*time.Second, "ORDER_CREATED published", func() (bool, string) {
		n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueOrderCreated)
		return n == 1, fmt.Sprintf("queue depth %d", n)
	})
	// Crashes up to the limit: DeliveryLimit(3) = 2 failed deliveries.
	for i := range pipeline.DeliveryLimit(maxAttempts) {
		if _, ok := dieHolding(t, e.amqpURL, pipeline.QueueOrderCreated); !ok {
			t.Fatalf("crash %d: no delivery", i+1)
		}
	}
	var seen attempts
	c := e.consumer(pipeline.ConsumerConfig{MaxAttempts: maxAttempts})
	c.TestSignals.BeforeHandle = func(h string, ev order.Event, attempt int) error {
		if h != pipeline.ConsumerOrderLock {
			return nil
		}
		seen.add(attempt)
		if attempt < maxAttempts {
			return errTransient
		}
		return nil
	}
	run(t, "consumer", c.Run)
	// Delays 1s + 2s.
	e.waitCount(20*time.Second, 1, `SELECT COUNT(*) FROM order_info WHERE order_no = ? AND status = 'WAITING_PAY'`, no)
	if got := seen.get(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("attempts %v, want [1 2 3]", got)
	}
	time.Sleep(300 * time.Millisecond)
	if n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueDLQ); n != 0 {
		t.Errorf("dlq depth %d: a good message was dead-lettered", n)
	}
	if st := e.consumerStats(c); st.Rejected != 0 || st.Requeued != 2 {
		t.Errorf("stats %+v", st)
	}
}
