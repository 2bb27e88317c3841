package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// intakeBatch reads the reservations of k's intake stream, in stream order.
func (e *env) intakeBatch(k lua.Keys) []order.Reservation {
	e.t.Helper()
	msgs, err := e.rdb.XRange(context.Background(), k.Intake(), "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	batch := make([]order.Reservation, 0, len(msgs))
	for _, m := range msgs {
		r, err := lua.ParseReservation(m.Values)
		if err != nil {
			e.t.Fatal(err)
		}
		batch = append(batch, r)
	}
	return batch
}

// The careful attempt of InsertLockedReservations (after a duplicate key in
// the fast one) must not take another writer's order of the same
// reservation, committed while the careful attempt runs, for a reused
// requestId: that order stays stored WAITING_PAY and gets no RELEASE flow,
// and the careful attempt counts it a Duplicate.
//
// The interleaving, forced with row locks: writer A stores x and waits for
// the product's stock row (held); writer B's batch [y, x] starts with y,
// whose (user, product, requestId) belongs to an order stored long ago
// within its lifetime (a genuinely reused requestId), so B's fast insert
// fails at once and B goes careful: it reads x as not stored (A has not
// committed), stores y FAILED and then waits on y's RELEASE flow key, held
// by an uncommitted insert of a third connection. Meanwhile A commits x;
// then the third connection rolls back and B goes on to x. (With the fix,
// B's read of what is stored waits for A's uncommitted row x instead and
// finds it stored once A commits.)
func TestCarefulInsertKeepsAnotherWritersOrder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(100, 100)
	names := map[int64]string{p.ID: p.Name}
	// z: an order of user 1, requestId "req-1", stored long ago.
	e.reserve(p, k, 1, 1, 1)
	z := e.intakeBatch(k)
	if _, err := e.store.InsertLockedReservations(ctx, z, names, order.DefaultRequestTTL, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Del(ctx, k.Intake()).Err(); err != nil {
		t.Fatal(err)
	}
	// y: the same user, product and requestId again (Redis lost the
	// record); x: an ordinary order of user 2.
	y, err := lua.Reserve(ctx, e.rdb, k, lua.ReserveArgs{OrderNo: e.gen.Next(p.ID, 0), UserID: 1, RequestID: "req-1-lost", Quantity: 1, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e.reserve(p, k, 2, 1, 1)
	batch := e.intakeBatch(k)
	batch[0].RequestID = "req-1" // as if the record of req-1 were lost
	x := batch[1]
	if batch[0].OrderNo != y.OrderNo {
		t.Fatalf("bad setup: %+v", batch)
	}

	// The third connection holds y's RELEASE flow key.
	flowTx, err := e.store.DB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer flowTx.Rollback()
	if _, err := flowTx.Exec(`INSERT INTO stock_flow (biz_type, biz_no, product_id, quantity, reason) VALUES ('RELEASE', ?, ?, 0, 'held')`,
		y.OrderNo, p.ID); err != nil {
		t.Fatal(err)
	}
	release := e.holdStock(p.ID)

	var wg sync.WaitGroup
	var resA, resB persistence.LockedInsertResult
	var errA, errB error
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		resA, errA = e.store.InsertLockedReservations(ctx, []order.Reservation{x}, names, order.DefaultRequestTTL, time.Hour)
	}()
	pipelinetest.WaitFor(t, 10*time.Second, "A waits for the stock row", func() (bool, string) {
		n := e.count(`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND COMMAND = 'Query' AND INFO LIKE 'UPDATE stock %'`)
		return n == 1, fmt.Sprintf("%d waiting", n)
	})
	wg.Go(func() {
		resB, errB = e.store.InsertLockedReservations(ctx, batch, names, order.DefaultRequestTTL, time.Hour)
	})
	// Before the fix B stops at y's RELEASE flow key, having read x as not
	// stored; with it, B's read of what is stored waits for A's row x.
	pipelinetest.WaitFor(t, 10*time.Second, "B waits for y's RELEASE flow key or for A's row x", func() (bool, string) {
		n := e.count(`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND COMMAND = 'Query'
			AND (INFO LIKE 'INSERT INTO stock_flow %' OR INFO LIKE 'SELECT order_no, request_id FROM order_info %')`)
		return n == 1, fmt.Sprintf("%d waiting", n)
	})
	release() // A commits x
	select {
	case <-doneA:
	case <-time.After(10 * time.Second):
		t.Fatal("A did not commit")
	}
	if errA != nil {
		t.Fatalf("A: %v", errA)
	}
	flowTx.Rollback() // B goes on
	wg.Wait()
	if errB != nil {
		t.Fatalf("B: %v", errB)
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'RELEASE' AND biz_no = ?`, x.OrderNo); n != 0 {
		t.Errorf("x (%s), stored WAITING_PAY by A, has %d RELEASE flows", x.OrderNo, n)
	}
	var st string
	if err := e.store.DB.QueryRow(`SELECT status FROM order_info WHERE order_no = ?`, x.OrderNo).Scan(&st); err != nil || st != string(order.WaitingPay) {
		t.Errorf("x is %q (%v), want WAITING_PAY", st, err)
	}
	if n := e.count(`SELECT COUNT(*) FROM mq_outbox WHERE payload LIKE ?`, "%"+x.OrderNo+"%REQUEST_REUSED%"); n != 0 {
		t.Errorf("%d FAILED REQUEST_REUSED events of x", n)
	}
	if resA.Locked != 1 || resB.Reused != 1 || resB.Duplicates != 1 || resB.Inserted != 0 {
		t.Errorf("A %+v, B %+v: want A to lock x, B to find x stored and y reused", resA, resB)
	}
	if st := e.stock(p.ID); st.Locked != 2 {
		t.Errorf("mysql stock %+v, want z and x locked", st)
	}
}

// A batch holding an intent and its resend after Redis lost the record
// (same user, product and requestId, a new orderNo) is written, not retried
// forever: the first is stored, the second stored FAILED REQUEST_REUSED and
// released. (Before, both were fresh in the careful attempt too, met the
// unique key on every attempt and the writer retried the batch for good.)
func TestLockedInsertSortsOutReuseWithinTheBatch(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(100, 100)
	e.reserve(p, k, 1, 1, 1)
	if err := e.rdb.Del(ctx, k.Request(1, "req-1")).Err(); err != nil {
		t.Fatal(err)
	}
	e.reserve(p, k, 1, 1, 1)
	batch := e.intakeBatch(k)
	if len(batch) != 2 || batch[0].RequestID != batch[1].RequestID {
		t.Fatalf("bad setup: %+v", batch)
	}
	res, err := e.store.InsertLockedReservations(ctx, batch, map[int64]string{p.ID: p.Name}, order.DefaultRequestTTL, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if res.Locked != 1 || res.Reused != 1 || res.Inserted != 1 {
		t.Errorf("result %+v: want the first locked, the second reused", res.InsertResult)
	}
	var st, reason string
	if err := e.store.DB.QueryRow(`SELECT status, COALESCE(close_reason, '') FROM order_info WHERE order_no = ?`, batch[1].OrderNo).Scan(&st, &reason); err != nil ||
		st != string(order.Failed) || reason != "REQUEST_REUSED" {
		t.Errorf("the resend is %s %s (%v), want FAILED REQUEST_REUSED", st, reason, err)
	}
	if st := e.stock(p.ID); st.Locked != 1 {
		t.Errorf("mysql stock %+v, want 1 locked", st)
	}
}

// The release consumer gives a unit back in Redis only for an order MySQL
// has released: a FAILED (or CANCELLED) event naming an order that is still
// WAITING_PAY — what the writers' race published — changes nothing in Redis
// and is counted; a real release still goes through.
func TestReleaseConsumerRefusesOrdersMySQLHolds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(10, 10)
	nos := e.reserve(p, k, 1, 2, 1)
	w := e.lockingWriter(pipeline.WriterConfig{BatchWait: 5 * time.Millisecond})
	run(t, "writer", w.Run)
	e.waitCount(10*time.Second, 2, `SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`)
	held, closed := nos[0], nos[1]
	if _, err := e.store.CloseOrder(ctx, persistence.CloseRequest{OrderNo: closed, UserID: 2, Reason: order.ReasonUser,
		From: []order.Status{order.WaitingPay}}); err != nil {
		t.Fatal(err)
	}
	c := e.consumer(pipeline.ConsumerConfig{})
	run(t, "consumer", c.Run)
	ch := pipelinetest.Channel(t, e.amqpURL)
	if err := e.topology().Declare(ch); err != nil {
		t.Fatal(err)
	}
	evs := []order.Event{
		{OrderNo: held, UserID: 1, ProductID: p.ID, Quantity: 1, From: order.Processing, Status: order.Failed, Version: 1, Reason: "REQUEST_REUSED", OccurredAt: time.Now()},
		{OrderNo: closed, UserID: 2, ProductID: p.ID, Quantity: 1, From: order.WaitingPay, Status: order.Cancelled, Version: 3, Reason: "USER", OccurredAt: time.Now()},
	}
	for _, ev := range evs {
		m, err := persistence.StatusMessage(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.PublishWithContext(ctx, "", pipeline.QueueStockRelease, false, false, amqp.Publishing{Body: m.Payload, MessageId: m.EventID}); err != nil {
			t.Fatal(err)
		}
	}
	pipelinetest.WaitFor(t, 10*time.Second, "the refusal", func() (bool, string) {
		n := e.metric(c, "stampede_consumer_releases_refused_total")
		return n == 1, fmt.Sprintf("%d refused", n)
	})
	pipelinetest.WaitFor(t, 10*time.Second, "the closed order's release", func() (bool, string) {
		a := e.redisAvailable(k)
		return a == 9, fmt.Sprintf("redis available %d, want 9 (one unit back, the held order's kept)", a)
	})
	time.Sleep(200 * time.Millisecond)
	if a := e.redisAvailable(k); a != 9 {
		t.Errorf("redis available %d, want 9", a)
	}
}

// A close pass's status batch is released in Redis in one pipeline: every
// order once, also right after Redis lost its scripts (SCRIPT FLUSH: the
// pipeline's calls answer NOSCRIPT and are run again on their own), and a
// redelivery of the batch releases nothing twice.
func TestReleaseBatchPipelinedAfterScriptFlush(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(100, 100)
	nos := e.reserve(p, k, 1, 30, 2)
	w := e.lockingWriter(pipeline.WriterConfig{BatchWait: 5 * time.Millisecond})
	stopWriter := run(t, "writer", w.Run)
	e.waitCount(10*time.Second, 30, `SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`)
	stopWriter()
	if _, err := e.store.DB.Exec(`UPDATE order_info SET pay_deadline = NOW(3) - INTERVAL 1 SECOND WHERE product_id = ?`, p.ID); err != nil {
		t.Fatal(err)
	}
	closed, err := e.store.CloseDueBatch(ctx, 100)
	if err != nil || len(closed) != len(nos) {
		t.Fatalf("closed %d (%v), want %d", len(closed), err, len(nos))
	}
	if err := e.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c := e.consumer(pipeline.ConsumerConfig{})
	run(t, "consumer", c.Run)
	run(t, "relay", e.relay(pipeline.RelayConfig{}).Run)
	pipelinetest.WaitFor(t, 10*time.Second, "the batch released", func() (bool, string) {
		a := e.redisAvailable(k)
		return a == 100, fmt.Sprintf("redis available %d, want 100", a)
	})
	if _, err := e.store.DB.Exec(`UPDATE mq_outbox SET status = 'NEW', next_retry_at = NOW(3) WHERE routing_key = ?`, order.RouteStatus(order.Cancelled)); err != nil {
		t.Fatal(err)
	}
	pipelinetest.WaitFor(t, 10*time.Second, "the redelivered batch handled", func() (bool, string) {
		n := e.metric(c, "stampede_consumer_messages_total", "handler", pipeline.ConsumerStockRelease, "outcome", pipeline.OutcomeDuplicate)
		return n >= 1, fmt.Sprintf("%d duplicates", n)
	})
	if a := e.redisAvailable(k); a != 100 {
		t.Errorf("redis available %d after the redelivery, want 100", a)
	}
}
