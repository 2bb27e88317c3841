package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// attempts records the delivery attempts the order-lock handler saw.
type attempts struct {
	mu   sync.Mutex
	seen []int
}

func (a *attempts) add(n int) {
	a.mu.Lock()
	a.seen = append(a.seen, n)
	a.mu.Unlock()
}

func (a *attempts) get() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

var errTransient = errors.New("injected: mysql unavailable")

// declare dials e's vhost once, which declares the whole topology.
func (e *env) declare() {
	e.t.Helper()
	ch, err := e.conn().Channel(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	ch.Close()
}

func TestConsumerRetriesThroughDelayQueue(t *testing.T) {
	forEachQueueType(t, testConsumerRetriesThroughDelayQueue)
}

func testConsumerRetriesThroughDelayQueue(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	e.declare()
	p, k := e.product(10, 10)
	var seen attempts
	_, _, c := startPipelineSignals(e, pipeline.ConsumerConfig{}, pipeline.ConsumerTestSignals{BeforeHandle: func(h string, ev order.Event, attempt int) error {
		if h != pipeline.ConsumerOrderLock {
			return nil
		}
		seen.add(attempt)
		if attempt < 3 {
			return errTransient
		}
		return nil
	}})
	no := e.reserve(p, k, 1, 1, 1)[0]
	// Delays 1s + 2s.
	e.waitCount(20*time.Second, 1, `SELECT COUNT(*) FROM order_info WHERE order_no = ? AND status = 'WAITING_PAY'`, no)
	time.Sleep(500 * time.Millisecond) // any extra delivery would show now
	if got := seen.get(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("attempts %v, want [1 2 3]", got)
	}
	if n := e.count(`SELECT COUNT(*) FROM mq_consume_log WHERE consumer_name = ?`, pipeline.ConsumerOrderLock); n != 1 {
		t.Errorf("%d consume log rows", n)
	}
	if st := e.consumerStats(c); st.Requeued != 2 || st.Rejected != 0 {
		t.Errorf("stats %+v, want 2 retries", st)
	}
	if n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueDLQ); n != 0 {
		t.Errorf("dlq depth %d", n)
	}
}

func TestConsumerDeadLettersAfterMaxAttemptsAndReplays(t *testing.T) {
	forEachQueueType(t, testConsumerDeadLettersAfterMaxAttemptsAndReplays)
}

func testConsumerDeadLettersAfterMaxAttemptsAndReplays(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	e.declare()
	p, k := e.product(10, 10)
	var seen attempts
	var healthy atomic.Bool
	_, _, c := startPipelineSignals(e, pipeline.ConsumerConfig{MaxAttempts: 3}, pipeline.ConsumerTestSignals{BeforeHandle: func(h string, ev order.Event, attempt int) error {
		if h != pipeline.ConsumerOrderLock {
			return nil
		}
		seen.add(attempt)
		if healthy.Load() {
			return nil
		}
		return errTransient
	}})
	no := e.reserve(p, k, 1, 1, 1)[0]
	ctx := context.Background()
	pipelinetest.WaitFor(t, 20*time.Second, "dead-lettered", func() (bool, string) {
		n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueDLQ)
		return n == 1, fmt.Sprintf("dlq depth %d", n)
	})
	time.Sleep(1500 * time.Millisecond) // no hot loop: no delivery after the dead letter
	if got := seen.get(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("attempts %v, want [1 2 3]", got)
	}
	if st := e.consumerStats(c); st.Requeued != 2 || st.Rejected != 1 {
		t.Errorf("stats %+v", st)
	}
	conn := e.conn()
	rep, err := pipeline.InspectDLQ(ctx, conn, e.store, 10)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Depth != 1 || len(rep.Messages) != 1 {
		t.Fatalf("dlq report %+v", rep)
	}
	m := rep.Messages[0]
	if m.Queue != pipeline.QueueOrderCreated || m.Handler != pipeline.ConsumerOrderLock || m.Attempts != 3 ||
		!strings.Contains(m.Reason, "mysql unavailable") || m.OutboxStatus != "SENT" || m.Type != string(order.EventCreated) ||
		m.RoutingKey != order.RouteCreated {
		t.Errorf("dlq message %+v", m)
	}
	// The peek left it in the queue.
	if n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueDLQ); n != 1 {
		t.Errorf("dlq depth %d after peek", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM order_info WHERE order_no = ? AND status = 'PROCESSING'`, no); n != 1 {
		t.Fatalf("order not PROCESSING")
	}

	healthy.Store(true)
	res, err := pipeline.ReplayDLQ(ctx, conn, e.store, pipeline.ReplayRequest{EventIDs: []string{m.EventID, "nope"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Replayed, []string{m.EventID}) || res.Acked != 1 || !slices.Equal(res.NotFound, []string{"nope"}) {
		t.Errorf("replay %+v", res)
	}
	e.waitCount(20*time.Second, 1, `SELECT COUNT(*) FROM order_info WHERE order_no = ? AND status = 'WAITING_PAY'`, no)
	if n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueDLQ); n != 0 {
		t.Errorf("dlq depth %d after replay", n)
	}
	// Replaying the applied event again changes nothing (consume log).
	e.waitCount(10*time.Second, 0, `SELECT COUNT(*) FROM mq_outbox WHERE status <> 'SENT'`)
	if _, err := e.store.ReplayOutbox(ctx, []string{m.EventID}); err != nil {
		t.Fatal(err)
	}
	e.waitCount(10*time.Second, 0, `SELECT COUNT(*) FROM mq_outbox WHERE status <> 'SENT'`)
	pipelinetest.WaitFor(t, 10*time.Second, "duplicate consumed", func() (bool, string) {
		n := len(seen.get())
		return n == 5, fmt.Sprintf("%d deliveries", n)
	})
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'LOCK' AND biz_no = ?`, no); n != 1 {
		t.Errorf("%d LOCK flows", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM mq_consume_log WHERE event_id = ?`, m.EventID); n != 1 {
		t.Errorf("%d consume log rows", n)
	}
	if st := e.stock(p.ID); st.Locked != 1 || st.Available != 9 {
		t.Errorf("stock %+v", st)
	}
}

func TestConsumerPoisonGoesToDLQAtOnce(t *testing.T) {
	forEachQueueType(t, testConsumerPoisonGoesToDLQAtOnce)
}

func testConsumerPoisonGoesToDLQAtOnce(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	e.declare()
	var deliveries atomic.Int64
	c := e.consumer(pipeline.ConsumerConfig{})
	c.TestSignals.BeforeHandle = func(string, order.Event, int) error {
		deliveries.Add(1)
		return nil
	}
	run(t, "consumer", c.Run)
	conn := e.conn()
	ctx := context.Background()
	ch, err := conn.Channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for i, body := range []string{`{not json`, `{"eventId":"x","orderNo":"bad","type":"ORDER_CREATED"}`} {
		if err := ch.PublishWithContext(ctx, "", pipeline.QueueOrderCreated, false, false, amqp.Publishing{
			MessageId: fmt.Sprintf("poison-%d", i), Body: []byte(body), DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatal(err)
		}
	}
	pipelinetest.WaitFor(t, 10*time.Second, "poison dead-lettered", func() (bool, string) {
		n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueDLQ)
		return n == 2, fmt.Sprintf("dlq depth %d", n)
	})
	time.Sleep(1500 * time.Millisecond)
	if st := e.consumerStats(c); st.Rejected != 2 || st.Requeued != 0 {
		t.Errorf("stats %+v: poison must not be retried", st)
	}
	if n := deliveries.Load(); n != 0 {
		t.Errorf("%d handler runs for undecodable bodies", n)
	}
	rep, err := pipeline.InspectDLQ(ctx, conn, e.store, 10)
	if err != nil || len(rep.Messages) != 2 {
		t.Fatalf("%+v %v", rep, err)
	}
	for _, m := range rep.Messages {
		if m.Attempts != 1 || m.OutboxStatus != "" || m.Reason == "" {
			t.Errorf("poison %+v", m)
		}
	}
	// Without an outbox row a replay keeps them, unless told to drop.
	res, err := pipeline.ReplayDLQ(ctx, conn, e.store, pipeline.ReplayRequest{All: true})
	if err != nil || len(res.Kept) != 2 || res.Acked != 0 {
		t.Fatalf("replay %+v %v", res, err)
	}
	if n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueDLQ); n != 2 {
		t.Errorf("dlq depth %d", n)
	}
	res, err = pipeline.ReplayDLQ(ctx, conn, e.store, pipeline.ReplayRequest{EventIDs: []string{"poison-0"}, DropPoison: true})
	if err != nil || !slices.Equal(res.Dropped, []string{"poison-0"}) {
		t.Fatalf("drop %+v %v", res, err)
	}
	if n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueDLQ); n != 1 {
		t.Errorf("dlq depth %d after drop", n)
	}
}

func TestWriterSplitsRejectedBatch(t *testing.T) {
	e := newEnv(t)
	e.declare()
	p, k := e.product(100, 100)
	nos := e.reserve(p, k, 1, 9, 1)
	ctx := context.Background()
	// An entry MySQL refuses (quantity beyond INT) in the middle of good ones.
	bad := e.gen.Next(p.ID, 0)
	if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Intake(), Values: map[string]any{
		lua.FieldOrderNo: bad, lua.FieldUser: "999", lua.FieldRequest: "req-bad", lua.FieldQuantity: "3000000000",
		lua.FieldUnitPrice: "1999", lua.FieldAccepted: fmt.Sprint(time.Now().UnixMilli())}}).Err(); err != nil {
		t.Fatal(err)
	}
	nos = append(nos, e.reserve(p, k, 100, 6, 1)...)
	w := e.writer(pipeline.WriterConfig{BatchWait: 50 * time.Millisecond, RetryMin: 10 * time.Millisecond})
	run(t, "writer", w.Run)
	e.waitCount(20*time.Second, int64(len(nos)), `SELECT COUNT(*) FROM order_info WHERE product_id = ?`, p.ID)
	pipelinetest.WaitFor(t, 10*time.Second, "bad entry buried", func() (bool, string) {
		n, _ := e.rdb.XLen(ctx, k.Intake()+":dead").Result()
		return n == 1, fmt.Sprintf("dead stream %d", n)
	})
	dead, _ := e.rdb.XRange(ctx, k.Intake()+":dead", "-", "+").Result()
	if dead[0].Values["f:"+lua.FieldOrderNo] != bad {
		t.Errorf("dead entry %v", dead[0].Values)
	}
	if n := e.count(`SELECT COUNT(*) FROM order_info WHERE order_no = ?`, bad); n != 0 {
		t.Errorf("bad order written")
	}
	pipelinetest.WaitFor(t, 10*time.Second, "stream drained", func() (bool, string) {
		n, _ := e.rdb.XLen(ctx, k.Intake()).Result()
		return n == 0, fmt.Sprintf("intake %d", n)
	})
}
