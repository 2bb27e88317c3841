package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// startPipeline runs a writer, a relay and a consumer.
func startPipeline(e *env, ccfg pipeline.ConsumerConfig) (*pipeline.Writer, *pipeline.Relay, *pipeline.Consumer) {
	return startPipelineSignals(e, ccfg, pipeline.ConsumerTestSignals{})
}

// startPipelineSignals is startPipeline with the consumer's test signals.
func startPipelineSignals(e *env, ccfg pipeline.ConsumerConfig, sig pipeline.ConsumerTestSignals) (*pipeline.Writer, *pipeline.Relay, *pipeline.Consumer) {
	w := e.writer(pipeline.WriterConfig{BatchWait: 5 * time.Millisecond})
	r := e.relay(pipeline.RelayConfig{})
	c := e.consumer(ccfg)
	c.TestSignals = sig
	run(e.t, "writer", w.Run)
	run(e.t, "relay", r.Run)
	run(e.t, "consumer", c.Run)
	return w, r, c
}

func TestFlowLocksStockOnce(t *testing.T) { forEachQueueType(t, testFlowLocksStockOnce) }

func testFlowLocksStockOnce(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	p, k := e.product(100, 100)
	startPipeline(e, pipeline.ConsumerConfig{})
	nos := e.reserve(p, k, 1, 20, 2)
	nos = append(nos, e.reserve(p, k, 100, 10, 1)...)

	e.waitCount(20*time.Second, 30, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'WAITING_PAY' AND pay_deadline IS NOT NULL`, p.ID)
	// Every status change is published.
	e.waitCount(10*time.Second, 0, `SELECT COUNT(*) FROM mq_outbox WHERE status <> 'SENT'`)
	if st := e.stock(p.ID); st.Available != 50 || st.Locked != 50 || st.Sold != 0 {
		t.Errorf("mysql stock %+v, want 50 available and 50 locked", st)
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'LOCK' AND product_id = ?`, p.ID); n != 30 {
		t.Errorf("%d LOCK flows, want 30", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'RELEASE'`); n != 0 {
		t.Errorf("%d RELEASE flows, want 0", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM mq_consume_log WHERE consumer_name = ?`, pipeline.ConsumerOrderLock); n != 30 {
		t.Errorf("%d consume log rows, want 30", n)
	}
	if a := e.redisAvailable(k); a != 50 {
		t.Errorf("redis available %d, want 50", a)
	}
	for _, no := range nos[:3] {
		o, err := e.store.GetOrder(context.Background(), no)
		if err != nil || o.Status != order.WaitingPay || o.Version != 2 {
			t.Errorf("order %s: %+v %v", no, o, err)
		}
	}
	// No delayed close message: the sweeper's deadline scan closes unpaid
	// orders.
	if n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueuePayTimeoutDelay); n != 0 {
		t.Errorf("%d delayed close messages, want 0", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := pipeline.WaitIdle(ctx, e.rdb, e.store, []int64{p.ID}, 20*time.Millisecond)
	if err != nil || !rep.OK {
		t.Errorf("reconcile: %v %v", rep.Failed(), err)
	}
}

func TestFlowStockShortFailsAndReleasesRedisOnce(t *testing.T) {
	forEachQueueType(t, testFlowStockShortFailsAndReleasesRedisOnce)
}

func testFlowStockShortFailsAndReleasesRedisOnce(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	// Redis was loaded with more than MySQL has: three orders cannot lock.
	p, k := e.product(5, 8)
	_, _, c := startPipeline(e, pipeline.ConsumerConfig{})
	e.reserve(p, k, 1, 8, 1)
	if a := e.redisAvailable(k); a != 0 {
		t.Fatalf("redis available %d after 8 reservations", a)
	}
	e.waitCount(20*time.Second, 5, `SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`)
	e.waitCount(10*time.Second, 3, `SELECT COUNT(*) FROM order_info WHERE status = 'FAILED' AND close_reason = 'STOCK_SHORT'`)
	pipelinetest.WaitFor(t, 10*time.Second, "redis release of the failed orders", func() (bool, string) {
		a := e.redisAvailable(k)
		return a == 3, fmt.Sprintf("redis available %d, want 3", a)
	})
	e.waitCount(10*time.Second, 0, `SELECT COUNT(*) FROM mq_outbox WHERE status <> 'SENT'`)
	acked := e.consumerStats(c).Acked

	// The FAILED events are delivered again (a relay that died before
	// SENT): the Redis release must not happen twice.
	if _, err := e.store.DB.Exec(`UPDATE mq_outbox SET status = 'NEW', next_retry_at = NOW(3) WHERE routing_key = ?`, order.RouteStatus(order.Failed)); err != nil {
		t.Fatal(err)
	}
	e.waitCount(10*time.Second, 0, `SELECT COUNT(*) FROM mq_outbox WHERE status <> 'SENT'`)
	pipelinetest.WaitFor(t, 10*time.Second, "redelivered releases handled", func() (bool, string) {
		n := e.consumerStats(c).Acked - acked
		return n >= 3, fmt.Sprintf("%d acked since", n)
	})
	if a := e.redisAvailable(k); a != 3 {
		t.Errorf("redis available %d after duplicate releases, want 3", a)
	}
	if st := e.stock(p.ID); st.Available != 0 || st.Locked != 5 {
		t.Errorf("mysql stock %+v", st)
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'RELEASE' AND quantity = 0`); n != 3 {
		t.Errorf("%d RELEASE flows, want 3 of 0 units", n)
	}
	// (No reconcile here: Redis was deliberately loaded with 3 units more
	// than MySQL has, which is exactly the drift it would report.)
}

func TestConsumerRejectsPoisonAndKeepsGoing(t *testing.T) {
	forEachQueueType(t, testConsumerRejectsPoisonAndKeepsGoing)
}

func testConsumerRejectsPoisonAndKeepsGoing(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	p, k := e.product(10, 10)
	_, _, c := startPipeline(e, pipeline.ConsumerConfig{})
	// Make sure the topology exists, then publish garbage straight to the queues.
	ch := pipelinetest.Channel(t, e.amqpURL)
	if err := e.topology().Declare(ch); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{pipeline.QueueOrderCreated, pipeline.QueueStockRelease, pipeline.QueueOrderClose} {
		if err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: []byte("{not json")}); err != nil {
			t.Fatal(err)
		}
	}
	// A valid event of the wrong kind for the release queue.
	body := fmt.Sprintf(`{"eventId":"x","type":"ORDER_CREATED","orderNo":"%s","userId":1,"productId":%d,"quantity":1,"occurredAt":"2026-01-01T00:00:00Z"}`,
		order.FormatNo(1, 0, p.ID), p.ID)
	if err := ch.PublishWithContext(context.Background(), "", pipeline.QueueStockRelease, false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	pipelinetest.WaitFor(t, 10*time.Second, "poison rejected", func() (bool, string) {
		st := e.consumerStats(c)
		return st.Rejected == 4, fmt.Sprintf("%+v", st)
	})
	e.reserve(p, k, 1, 2, 1)
	e.waitCount(10*time.Second, 2, `SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`)
	if a := e.redisAvailable(k); a != 8 {
		t.Errorf("redis available %d", a)
	}
}

// The batch design: no delayed close message; the sweeper closes the unpaid
// orders at their deadline in one transaction, announces them in one
// CANCELLED status batch, and the release consumer gives each one's Redis
// reservation back exactly once, also when the batch is delivered again.
func TestFlowSweeperClosesUnpaidOrders(t *testing.T) {
	forEachQueueType(t, testFlowSweeperClosesUnpaidOrders)
}

func testFlowSweeperClosesUnpaidOrders(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	ctx := context.Background()
	p, k := e.product(10, 10)
	_, _, c := startPipeline(e, pipeline.ConsumerConfig{PayTimeout: time.Second})
	sw, err := pipeline.NewSweeper(e.store, pipeline.SweeperConfig{Interval: 50 * time.Millisecond, Redis: e.rdb, ReconcileInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	run(t, "sweeper", sw.Run)
	nos := e.reserve(p, k, 1, 3, 2)
	e.waitCount(10*time.Second, 3, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status IN ('WAITING_PAY', 'CANCELLED')`, p.ID)
	paid, err := e.store.GetOrder(ctx, nos[0])
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := e.store.Pay(ctx, persistence.Payment{PaymentNo: "pay-" + paid.OrderNo, OrderNo: paid.OrderNo, Amount: paid.Amount, PaidAt: time.Now()}); err != nil || out != persistence.PayPaid {
		t.Fatalf("pay: %v %v", out, err)
	}
	e.waitCount(10*time.Second, 2, `SELECT COUNT(*) FROM order_info WHERE status = 'CANCELLED' AND close_reason = ?`, string(order.ReasonTimeout))
	pipelinetest.WaitFor(t, 10*time.Second, "redis release of the closed orders", func() (bool, string) {
		a := e.redisAvailable(k)
		return a == 8, fmt.Sprintf("redis available %d, want 8", a)
	})
	e.waitCount(10*time.Second, 0, `SELECT COUNT(*) FROM mq_outbox WHERE status <> 'SENT'`)
	if n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueuePayTimeoutDelay); n != 0 {
		t.Errorf("%d delayed close messages, want none", n)
	}
	if st := e.stock(p.ID); st.Available != 8 || st.Locked != 0 || st.Sold != 2 {
		t.Errorf("mysql stock %+v, want 8 available, 2 sold", st)
	}
	// The CANCELLED batch again (a relay that died before marking it SENT).
	acked := e.consumerStats(c).Acked
	res, err := e.store.DB.Exec(`UPDATE mq_outbox SET status = 'NEW', next_retry_at = NOW(3) WHERE routing_key = ? AND event_type = ?`,
		order.RouteStatus(order.Cancelled), string(order.EventStatusBatch))
	if n, _ := res.RowsAffected(); err != nil || n < 1 {
		t.Fatalf("requeue the CANCELLED batch: %d rows, %v", n, err)
	}
	pipelinetest.WaitFor(t, 10*time.Second, "redelivered batch handled", func() (bool, string) {
		n := e.consumerStats(c).Acked - acked
		return n >= 1, fmt.Sprintf("%d acked since", n)
	})
	e.waitCount(10*time.Second, 0, `SELECT COUNT(*) FROM mq_outbox WHERE status <> 'SENT'`)
	if a := e.redisAvailable(k); a != 8 {
		t.Errorf("redis available %d after the redelivered batch, want 8 (released exactly once)", a)
	}
	for _, no := range nos[1:] {
		if n, _ := e.rdb.Exists(ctx, k.Released(no)).Result(); n != 1 {
			t.Errorf("no release marker for %s", no)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if rep, err := pipeline.WaitIdle(rctx, e.rdb, e.store, []int64{p.ID}, 20*time.Millisecond); err != nil || !rep.OK {
		t.Errorf("reconcile: %v %v", rep.Failed(), err)
	}
}
