package persistence_test

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

func TestOrderBacklog(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	b, err := s.OrderBacklog(ctx, time.Minute)
	if err != nil || b != (persistence.OrderBacklog{}) {
		t.Fatalf("empty: %+v %v", b, err)
	}
	p, err := s.CreateProduct(ctx, persistence.Product{Name: "phone", Price: 100, Total: 10, MaxPerOrder: 1,
		SaleStart: time.Now().Add(-time.Hour), SaleEnd: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := order.NewNoGenerator(1)
	now := time.Now().UTC()
	var batch []order.Reservation
	// Two orders accepted 5 minutes ago, one just now, one to be locked.
	for i, at := range []time.Time{now.Add(-5 * time.Minute), now.Add(-5 * time.Minute), now, now} {
		batch = append(batch, order.Reservation{OrderNo: gen.Next(p.ID, 0), UserID: int64(i + 1), RequestID: "r",
			ProductID: p.ID, Quantity: 1, UnitPrice: 100, AcceptedAt: at})
	}
	if _, err := s.InsertReservations(ctx, batch, map[int64]string{p.ID: p.Name}); err != nil {
		t.Fatal(err)
	}
	// Locked with a pay timeout of 1s, then overdue.
	if _, _, err := s.LockStock(ctx, "ev-1", batch[3].OrderNo, "order-lock", time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	b, err = s.OrderBacklog(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if b.StuckProcessing != 2 || b.OverdueWaitingPay != 1 || b.OldestProcessing < 4*time.Minute || b.OldestProcessing > 6*time.Minute {
		t.Errorf("backlog %+v, want 2 stuck, 1 overdue, oldest about 5m", b)
	}
}
