package persistence_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

func TestOutboxRetryDeadAndReplay(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	appendEvents(t, s, "ev", 3) // outbox_test.go
	// Two failures with a budget of 2: DEAD after the second, in one statement each.
	var ids []int64
	for round := range 2 {
		rows, err := s.ClaimOutbox(ctx, "me", 10, time.Minute)
		if err != nil || len(rows) != 3 {
			t.Fatalf("round %d: claimed %d, %v", round, len(rows), err)
		}
		ids = ids[:0]
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		dead, err := s.MarkRetryBatch(ctx, "me", ids, "confirm timeout", time.Microsecond, time.Millisecond, 2)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[int]int{0: 0, 1: 3}[round]; len(dead) != want {
			t.Fatalf("round %d: %d dead, want %d", round, len(dead), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	dead, err := s.DeadOutbox(ctx, 10)
	if err != nil || len(dead) != 3 || dead[0].RetryCount != 2 || dead[0].LastError != "confirm timeout" {
		t.Fatalf("dead %+v %v", dead, err)
	}
	reset, err := s.ReplayOutbox(ctx, []string{"ev-0", "ev-2", "missing"})
	slices.Sort(reset)
	if err != nil || !slices.Equal(reset, []string{"ev-0", "ev-2"}) {
		t.Fatalf("replay %v %v", reset, err)
	}
	st, err := s.OutboxStatuses(ctx, []string{"ev-0", "ev-1", "missing"})
	if err != nil || st["ev-0"] != "NEW" || st["ev-1"] != "DEAD" || len(st) != 2 {
		t.Fatalf("statuses %v %v", st, err)
	}
	rows, err := s.ClaimOutbox(ctx, "me", 10, time.Minute)
	if err != nil || len(rows) != 2 || rows[0].RetryCount != 0 {
		t.Fatalf("claim after replay %+v %v", rows, err)
	}
}

func TestAdjustStockOnce(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	p, err := s.CreateProduct(ctx, persistence.Product{Name: "phone", Price: 100, Total: 10, MaxPerOrder: 1,
		SaleStart: time.Now().Add(-time.Hour), SaleEnd: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.AdjustStock(ctx, p.ID, "R-1", 4, "found")
	if err != nil || !r.Applied || r.Available != 14 {
		t.Fatalf("first %+v %v", r, err)
	}
	r, err = s.AdjustStock(ctx, p.ID, "R-1", 4, "found")
	if err != nil || r.Applied || r.Available != 14 {
		t.Fatalf("replay %+v %v", r, err)
	}
	if _, err := s.AdjustStock(ctx, p.ID, "R-1", 5, ""); !errors.Is(err, persistence.ErrConflict) {
		t.Fatalf("other delta: %v", err)
	}
	if _, err := s.AdjustStock(ctx, p.ID, "R-2", -15, ""); !errors.Is(err, persistence.ErrNegativeStock) {
		t.Fatalf("below zero: %v", err)
	}
	if _, err := s.AdjustStock(ctx, p.ID+1000, "R-3", 1, ""); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("no product: %v", err)
	}
	a, err := s.AuditFlows(ctx, p.ID)
	if err != nil || a.AdjustTotal != 4 {
		t.Fatalf("audit %+v %v", a, err)
	}
}
