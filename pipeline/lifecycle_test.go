package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

func (e *env) reconciled(pid int64) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rep, err := pipeline.WaitIdle(ctx, e.rdb, e.store, []int64{pid}, 20*time.Millisecond)
	if err != nil || !rep.OK {
		e.t.Fatalf("docs/spec.md §5 audit: %v %v", rep.Failed(), err)
	}
}

// TestLifecyclePayVersusTimeoutRace: 200 orders past their pay deadline get a
// payment callback and a timeout close within the same millisecond, with the
// whole pipeline running (so CANCELLED orders are released in Redis by the
// release consumer). Each order ends PAID xor CANCELLED; CANCELLED ones have
// exactly one RELEASE flow, PAID ones none; MySQL and Redis stock satisfy
// docs/spec.md §5 afterwards.
func TestLifecyclePayVersusTimeoutRace(t *testing.T) {
	forEachQueueType(t, testLifecyclePayVersusTimeoutRace)
}

func testLifecyclePayVersusTimeoutRace(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	ctx := context.Background()
	p, k := e.product(400, 400)
	// The delayed close messages stay out of the way (1h); the deadlines are
	// then moved into the past, so the close the sweeper runs is due.
	startPipeline(e, pipeline.ConsumerConfig{PayTimeout: time.Hour})
	nos := e.reserve(p, k, 1, 200, 2)
	e.waitCount(20*time.Second, 200, `SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`)
	if _, err := e.store.DB.Exec(`UPDATE order_info SET pay_deadline = NOW(3) - INTERVAL 1 SECOND WHERE product_id = ?`, p.ID); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, no := range nos {
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			if _, _, err := e.store.Pay(ctx, persistence.Payment{PaymentNo: fmt.Sprintf("race-%d", i), OrderNo: no, Amount: 2 * p.Price, PaidAt: time.Now()}); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			_, err := e.store.CloseOrder(ctx, persistence.CloseRequest{OrderNo: no, Reason: order.ReasonTimeout, From: []order.Status{order.WaitingPay}, Due: true})
			if err != nil && !errors.Is(err, persistence.ErrInvalidState) {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	paid := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'PAID'`, p.ID)
	cancelled := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'CANCELLED'`, p.ID)
	t.Logf("200 pay/close races: %d PAID, %d CANCELLED", paid, cancelled)
	if paid+cancelled != 200 {
		t.Fatalf("PAID %d + CANCELLED %d != 200", paid, cancelled)
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow f JOIN order_info o ON o.order_no = f.biz_no
		WHERE f.biz_type = 'RELEASE' AND o.status = 'PAID'`); n != 0 {
		t.Errorf("%d RELEASE flows of PAID orders", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM order_info o WHERE o.status = 'CANCELLED' AND
		(SELECT COUNT(*) FROM stock_flow f WHERE f.biz_type = 'RELEASE' AND f.biz_no = o.order_no) <> 1`); n != 0 {
		t.Errorf("%d CANCELLED orders without exactly one RELEASE flow", n)
	}
	e.reconciled(p.ID)
	if a := e.redisAvailable(k); a != 400-2*paid {
		t.Errorf("redis available %d, want %d", a, 400-2*paid)
	}
}

// TestLifecycleReleaseTriggeredManyTimes: one WAITING_PAY order is cancelled
// by its user 5× concurrently while the sweeper runs and duplicate delayed
// close messages and duplicate CANCELLED events arrive. One RELEASE flow;
// stock back by exactly its quantity in MySQL and in Redis.
func TestLifecycleReleaseTriggeredManyTimes(t *testing.T) {
	forEachQueueType(t, testLifecycleReleaseTriggeredManyTimes)
}

func testLifecycleReleaseTriggeredManyTimes(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	ctx := context.Background()
	p, k := e.product(10, 10)
	startPipeline(e, pipeline.ConsumerConfig{PayTimeout: 100 * time.Millisecond})
	sweeper, err := pipeline.NewSweeper(e.store, pipeline.SweeperConfig{Interval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	nos := e.reserve(p, k, 1, 1, 3)
	e.waitCount(10*time.Second, 1, `SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`)
	if a := e.redisAvailable(k); a != 7 {
		t.Fatalf("redis available %d before the release", a)
	}
	o, _ := e.store.GetOrder(ctx, nos[0])

	// Duplicate close messages and a duplicate CANCELLED event, published
	// straight to the queues the consumers read.
	conn, err := amqp.Dial(e.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	publish := func(queue string, ev order.Event) {
		body, _ := json.Marshal(ev)
		if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{Body: body, MessageId: ev.EventID}); err != nil {
			t.Error(err)
		}
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := e.store.CloseOrder(ctx, persistence.CloseRequest{OrderNo: o.OrderNo, UserID: o.UserID, Reason: order.ReasonUser,
				From: []order.Status{order.Processing, order.WaitingPay}})
			if err != nil && !errors.Is(err, persistence.ErrInvalidState) {
				t.Error(err)
			}
		}()
	}
	time.Sleep(110 * time.Millisecond) // past the deadline: the sweeper and close messages may close it too
	close(start)
	run(t, "sweeper", sweeper.Run)
	for range 3 {
		publish(pipeline.QueueOrderClose, order.Event{EventID: order.PayTimeoutEventID(o.OrderNo), Type: order.EventPayTimeout,
			OrderNo: o.OrderNo, UserID: o.UserID, ProductID: o.ProductID, Quantity: o.Quantity, OccurredAt: time.Now()})
	}
	wg.Wait()
	e.waitCount(10*time.Second, 1, `SELECT COUNT(*) FROM order_info WHERE status = 'CANCELLED'`)
	cur, _ := e.store.GetOrder(ctx, o.OrderNo)
	for range 3 {
		publish(pipeline.QueueStockRelease, order.Event{EventID: order.StatusEventID(o.OrderNo, cur.Version), Type: order.EventStatusChanged,
			OrderNo: o.OrderNo, UserID: o.UserID, ProductID: o.ProductID, Quantity: o.Quantity, Status: order.Cancelled, Version: cur.Version, OccurredAt: time.Now()})
	}
	pipelinetest.WaitFor(t, 10*time.Second, "queues drained", func() (bool, string) {
		n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueOrderClose) + pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueStockRelease)
		return n == 0, fmt.Sprintf("%d messages left", n)
	})
	e.reconciled(p.ID)
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'RELEASE' AND biz_no = ?`, o.OrderNo); n != 1 {
		t.Errorf("%d RELEASE flows, want 1", n)
	}
	if st := e.stock(p.ID); st.Available != 10 || st.Locked != 0 {
		t.Errorf("mysql stock %+v, want all 10 back", st)
	}
	if a := e.redisAvailable(k); a != 10 {
		t.Errorf("redis available %d, want 10 (3 back exactly once)", a)
	}
}

// TestLifecycleCancelWhileProcessing: an order cancelled while PROCESSING is
// skipped by the lock consumer (no MySQL lock) and its Redis reservation is
// released once; the FAILED path (MySQL short) followed by a cancel attempt
// does not release a second time.
func TestLifecycleCancelWhileProcessing(t *testing.T) {
	forEachQueueType(t, testLifecycleCancelWhileProcessing)
}

func testLifecycleCancelWhileProcessing(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	ctx := context.Background()
	p, k := e.product(1, 5) // MySQL has 1 unit, Redis 5: the second order fails in MySQL
	w := e.writer(pipeline.WriterConfig{BatchWait: 5 * time.Millisecond})
	stopWriter := run(t, "writer", w.Run)
	nos := e.reserve(p, k, 1, 1, 2) // 2 units: more than MySQL's 1 → FAILED
	e.waitCount(10*time.Second, 1, `SELECT COUNT(*) FROM order_info`)
	stopWriter()
	// The first order is cancelled while still PROCESSING (no consumer runs yet).
	cancelled, err := e.store.CloseOrder(ctx, persistence.CloseRequest{OrderNo: nos[0], UserID: 1, Reason: order.ReasonUser,
		From: []order.Status{order.Processing, order.WaitingPay}})
	if err != nil || cancelled.Status != order.Cancelled {
		t.Fatalf("cancel while PROCESSING: %+v %v", cancelled, err)
	}
	failing := e.reserve(p, k, 2, 1, 1)
	// MySQL stock of p is 1 and the second order wants 1, so make it short:
	if _, err := e.store.DB.Exec(`UPDATE stock SET available = 0 WHERE product_id = ?`, p.ID); err != nil {
		t.Fatal(err)
	}
	startPipeline(e, pipeline.ConsumerConfig{PayTimeout: time.Hour})
	e.waitCount(10*time.Second, 1, `SELECT COUNT(*) FROM order_info WHERE status = 'FAILED'`)
	if _, err := e.store.CloseOrder(ctx, persistence.CloseRequest{OrderNo: failing[0], UserID: 2, Reason: order.ReasonUser,
		From: []order.Status{order.Processing, order.WaitingPay}}); !errors.Is(err, persistence.ErrInvalidState) {
		t.Fatalf("cancel of a FAILED order: %v", err)
	}
	pipelinetest.WaitFor(t, 10*time.Second, "both reservations back in Redis", func() (bool, string) {
		a := e.redisAvailable(k)
		return a == 5, fmt.Sprintf("redis available %d, want 5", a)
	})
	e.waitCount(10*time.Second, 0, `SELECT COUNT(*) FROM mq_outbox WHERE status <> 'SENT'`)
	time.Sleep(100 * time.Millisecond)
	if a := e.redisAvailable(k); a != 5 {
		t.Errorf("redis available %d after settling, want 5", a)
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'LOCK'`); n != 0 {
		t.Errorf("%d LOCK flows: the cancelled order was locked", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'RELEASE'`); n != 2 {
		t.Errorf("%d RELEASE flows, want 2", n)
	}
}
