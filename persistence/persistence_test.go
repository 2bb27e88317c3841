package persistence_test

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

func TestMigrateIdempotent(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	applied, err := persistence.Migrate(context.Background(), s.DB)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second migrate applied %v, err %v", applied, err)
	}
	if err := persistence.Validate(context.Background(), s.DB); err != nil {
		t.Fatal(err)
	}
}

func TestInsertLockPayClose(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	p, err := s.CreateProduct(ctx, persistence.Product{Name: "phone", Price: 100, Total: 5, PerUserLimit: 2, MaxPerOrder: 2,
		SaleStart: time.Now().Add(-time.Hour), SaleEnd: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := order.NewNoGenerator(1)
	var batch []order.Reservation
	for i := range 3 {
		batch = append(batch, order.Reservation{OrderNo: gen.Next(p.ID, 0), UserID: int64(i + 1), RequestID: "r",
			ProductID: p.ID, Quantity: 2, UnitPrice: 100, AcceptedAt: time.Now().UTC()})
	}
	res, err := s.InsertReservations(ctx, batch, map[int64]string{p.ID: p.Name})
	if err != nil || res.Inserted != 3 {
		t.Fatalf("insert: %+v %v", res, err)
	}
	// Redelivery of the same batch writes nothing new.
	res, err = s.InsertReservations(ctx, batch, map[int64]string{p.ID: p.Name})
	if err != nil || res.Inserted != 0 || res.Duplicates != 3 {
		t.Fatalf("reinsert: %+v %v", res, err)
	}
	// Same user and requestId under another orderNo: stored FAILED, not lost.
	reuse := batch[0]
	reuse.OrderNo = gen.Next(p.ID, 0)
	res, err = s.InsertReservations(ctx, []order.Reservation{reuse}, map[int64]string{p.ID: p.Name})
	if err != nil || res.Reused != 1 {
		t.Fatalf("reuse: %+v %v", res, err)
	}
	if o, err := s.GetOrder(ctx, reuse.OrderNo); err != nil || o.Status != order.Failed {
		t.Fatalf("reused order: %+v %v", o, err)
	}

	// Lock 2+2 of 5; the third order finds MySQL short and fails.
	outcomes := map[persistence.LockOutcome]int{}
	for _, r := range batch {
		out, _, err := s.LockStock(ctx, order.CreatedEventID(r.OrderNo), r.OrderNo, "test", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		outcomes[out]++
	}
	if outcomes[persistence.LockLocked] != 2 || outcomes[persistence.LockFailed] != 1 {
		t.Fatalf("outcomes %v", outcomes)
	}
	if out, _, err := s.LockStock(ctx, order.CreatedEventID(batch[0].OrderNo), batch[0].OrderNo, "test", time.Minute); err != nil || out != persistence.LockDuplicate {
		t.Fatalf("duplicate event: %v %v", out, err)
	}
	st, _ := s.GetStock(ctx, p.ID)
	if st.Available != 1 || st.Locked != 4 {
		t.Fatalf("stock %+v", st)
	}
	// Pay the first, close the second.
	if out, o, err := s.Pay(ctx, persistence.Payment{PaymentNo: "pay-1", OrderNo: batch[0].OrderNo, Amount: 200, PaidAt: time.Now()}); err != nil || out != persistence.PayPaid || o.Status != order.Paid {
		t.Fatalf("pay: %v %+v %v", out, o, err)
	}
	if out, _, err := s.Pay(ctx, persistence.Payment{PaymentNo: "pay-1", OrderNo: batch[0].OrderNo, Amount: 200, PaidAt: time.Now()}); err != nil || out != persistence.PayDuplicate {
		t.Fatalf("duplicate pay: %v %v", out, err)
	}
	if _, err := s.CloseOrder(ctx, persistence.CloseRequest{OrderNo: batch[1].OrderNo, Reason: order.ReasonUser, From: []order.Status{order.WaitingPay}}); err != nil {
		t.Fatal(err)
	}
	st, _ = s.GetStock(ctx, p.ID)
	if st.Available != 3 || st.Locked != 0 || st.Sold != 2 {
		t.Fatalf("stock after pay and close %+v", st)
	}
}
