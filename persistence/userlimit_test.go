package persistence_test

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// The per-user limit holds in MySQL for the whole sale, whatever Redis
// said (a counter it lost): the writer's locked insert, the batch lock and
// the per-message lock store an order that would take its buyer past the
// limit FAILED (its units never locked), in batch order; a cancelled
// order gives its units back; paid ones count.
func TestPerUserLimitHoldsInMySQL(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	p, err := s.CreateProduct(ctx, persistence.Product{Name: "limited", Price: 250, Total: 20, MaxPerOrder: 2, PerUserLimit: 2,
		SaleStart: time.Now().Add(-time.Hour), SaleEnd: persistence.OpenEnd})
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := order.NewNoGenerator(3)
	u, v := nextUser.Add(1), nextUser.Add(1)
	res := func(user, qty int64, rid string) order.Reservation {
		return order.Reservation{OrderNo: gen.Next(p.ID, 0), UserID: user, RequestID: rid, ProductID: p.ID, Quantity: qty,
			UnitPrice: 250, AcceptedAt: time.Now().UTC()}
	}
	names := map[int64]string{p.ID: p.Name}
	status := func(no string) order.Status {
		t.Helper()
		o, err := s.GetOrder(ctx, no)
		if err != nil {
			t.Fatal(err)
		}
		return o.Status
	}
	want := func(step string, nos []string, sts ...order.Status) {
		t.Helper()
		for i, no := range nos {
			if got := status(no); got != sts[i] {
				t.Fatalf("%s: order %d is %s, want %s", step, i, got, sts[i])
			}
		}
	}

	// The writer's locked insert: u's second order is past the limit.
	b := []order.Reservation{res(u, 2, "a"), res(u, 1, "b"), res(v, 1, "c")}
	if _, err := s.InsertLockedReservations(ctx, b, names, time.Hour, time.Minute); err != nil {
		t.Fatal(err)
	}
	want("locked insert", []string{b[0].OrderNo, b[1].OrderNo, b[2].OrderNo}, order.WaitingPay, order.Failed, order.WaitingPay)
	if st, _ := s.GetStock(ctx, p.ID); st.Locked != 3 || st.Available != 17 {
		t.Fatalf("stock after the locked insert: %+v, want 3 locked", st)
	}
	// Cancelled: its units are given back to the allowance.
	if _, err := s.CloseOrder(ctx, persistence.CloseRequest{OrderNo: b[0].OrderNo, UserID: u, Reason: order.ReasonUser,
		From: []order.Status{order.WaitingPay}}); err != nil {
		t.Fatal(err)
	}
	again := []order.Reservation{res(u, 2, "d")}
	if _, err := s.InsertLockedReservations(ctx, again, names, time.Hour, time.Minute); err != nil {
		t.Fatal(err)
	}
	want("after a cancel", []string{again[0].OrderNo}, order.WaitingPay)

	// The batch lock: u holds 2 already.
	w := nextUser.Add(1)
	pb := []order.Reservation{res(u, 1, "e"), res(w, 2, "f"), res(w, 1, "g")}
	if _, err := s.InsertReservations(ctx, pb, names); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LockStockBatch(ctx, "order-lock", lockEvents([]string{pb[0].OrderNo, pb[1].OrderNo, pb[2].OrderNo}), time.Minute); err != nil {
		t.Fatal(err)
	}
	want("batch lock", []string{pb[0].OrderNo, pb[1].OrderNo, pb[2].OrderNo}, order.Failed, order.WaitingPay, order.Failed)

	// The per-message lock: a paid order counts.
	x := nextUser.Add(1)
	pm := []order.Reservation{res(x, 2, "h"), res(x, 1, "i")}
	if _, err := s.InsertReservations(ctx, pm, names); err != nil {
		t.Fatal(err)
	}
	if out, _, err := s.LockStock(ctx, order.CreatedEventID(pm[0].OrderNo), pm[0].OrderNo, "order-lock", time.Minute); err != nil || out != persistence.LockLocked {
		t.Fatalf("lock of x's first order: %v %v", out, err)
	}
	if _, _, err := s.Pay(ctx, persistence.Payment{OrderNo: pm[0].OrderNo, PaymentNo: "pay-" + pm[0].OrderNo, Amount: 500, PaidAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LockStock(ctx, order.CreatedEventID(pm[1].OrderNo), pm[1].OrderNo, "order-lock", time.Minute); err != nil {
		t.Fatal(err)
	}
	want("message lock", []string{pm[0].OrderNo, pm[1].OrderNo}, order.Paid, order.Failed)
}
