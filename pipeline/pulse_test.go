package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

// The console's pulse counts what the pipeline did: reservations accepted
// (written or still in the intake stream), orders per status, orders that
// reached WAITING_PAY, the units split, and the accepted → WAITING_PAY
// latency of the orders locked within the window.
func TestPulse(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(50, 50)
	other, otherKeys := e.product(5, 5)
	ops := pipeline.Ops{Store: e.store, Redis: e.rdb, Conn: e.conn(), PayTimeout: 15 * time.Minute}

	// Before any writer runs, accepted reservations are intake backlog.
	e.reserve(p, k, 1, 4, 2)
	read := func() pipeline.Pulse {
		t.Helper()
		r, err := ops.Pulse(ctx, []int64{p.ID, 999_999}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return r.(pipeline.Pulse)
	}
	r := read()
	if len(r.Sales) != 1 || r.Errors != nil {
		t.Fatalf("pulse %+v", r)
	}
	if s := r.Sales[0]; s.ProductID != p.ID || s.Accepted != 4 || s.IntakeBacklog != 4 || r.Intake != 4 || s.Available != 42 || s.LockedOrders != 0 {
		t.Fatalf("before the writer: %+v", s)
	}

	startPipeline(e, pipeline.ConsumerConfig{PayTimeout: 15 * time.Minute})
	e.reserve(p, k, 100, 6, 1)
	e.reserve(other, otherKeys, 200, 1, 1)
	e.waitCount(20*time.Second, 10, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'WAITING_PAY'`, p.ID)
	e.waitCount(10*time.Second, 0, `SELECT COUNT(*) FROM mq_outbox WHERE status <> 'SENT'`)
	r = read()
	s := r.Sales[0]
	if s.Accepted != 10 || s.IntakeBacklog != 0 || s.Orders[order.WaitingPay] != 10 || s.LockedOrders != 10 ||
		s.Locked != 14 || s.Sold != 0 || s.Available != 36 || s.Units != 50 {
		t.Fatalf("after the pipeline: %+v", s)
	}
	if r.OutboxUnsent != 0 || r.Queues[pipeline.QueueOrderCreated] != 0 || r.Queues[pipeline.QueueDLQ] != 0 || len(r.Queues) != 4 {
		t.Fatalf("backlog %+v", r)
	}
	// Ten orders of this product and one of the other were locked just now;
	// the latency is read over every product.
	if l := r.Latency; l.Samples != 11 || l.P50Ms <= 0 || l.P95Ms < l.P50Ms || l.MaxMs < l.P95Ms || l.MaxMs > 20_000 || l.WindowSeconds != 10 {
		t.Fatalf("latency %+v", l)
	}
	// An order locked before the window is not a sample.
	if _, err := e.store.DB.ExecContext(ctx, `UPDATE order_info SET pay_deadline = pay_deadline - INTERVAL 1 MINUTE WHERE product_id = ?`, other.ID); err != nil {
		t.Fatal(err)
	}
	if l := read().Latency; l.Samples != 10 {
		t.Fatalf("latency after moving one lock out of the window: %+v", l)
	}
}
