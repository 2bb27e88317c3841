package persistence_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// An open-ended sale round-trips as OpenEnd; Adjusted sums the ADJUST
// flows; ChangeProduct writes the row, bumps sale_version and audits in one
// transaction, and a change that changes nothing writes nothing; a failing
// change leaves the row as it was.
func TestChangeProductAndAudit(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Millisecond)
	p, err := s.CreateProductBy(ctx, 7, persistence.Product{Name: "tee", Price: 100, Total: 10, MaxPerOrder: 2, Shards: 1,
		SaleStart: start, SaleEnd: persistence.OpenEnd})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdjustStockBy(ctx, 7, p.ID, "R-1", 5, "found"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdjustStockBy(ctx, 7, p.ID, "R-1", 5, "found"); err != nil { // a replay: no second entry
		t.Fatal(err)
	}
	got, err := s.GetProduct(ctx, p.ID)
	if err != nil || !got.OpenEnded() || got.Adjusted != 5 || got.Units() != 15 || got.Paused || got.SaleVersion != 0 {
		t.Fatalf("product %+v %v", got, err)
	}
	pause := func(cur persistence.Product) (persistence.Product, map[string]any, error) {
		if cur.Paused {
			return cur, nil, nil
		}
		cur.Paused = true
		return cur, map[string]any{"paused": persistence.FromTo{From: false, To: true}}, nil
	}
	for i, want := range []bool{true, false} {
		after, changed, err := s.ChangeProduct(ctx, 8, persistence.ActionPause, p.ID, pause)
		if err != nil || changed != want || !after.Paused || after.SaleVersion != 1 {
			t.Fatalf("pause %d: %+v %v %v", i, after, changed, err)
		}
	}
	boom := errors.New("refused")
	if _, _, err := s.ChangeProduct(ctx, 8, persistence.ActionPatch, p.ID, func(cur persistence.Product) (persistence.Product, map[string]any, error) {
		return cur, nil, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("refused change: %v", err)
	}
	if _, _, err := s.ChangeProduct(ctx, 8, persistence.ActionPause, p.ID+100, pause); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("unknown product: %v", err)
	}
	entries, err := s.ListAudit(ctx, p.ID, 0, 10)
	if err != nil || len(entries) != 3 {
		t.Fatalf("audit %+v %v", entries, err)
	}
	for i, want := range []struct {
		action string
		admin  int64
	}{{persistence.ActionPause, 8}, {persistence.ActionAdjust, 7}, {persistence.ActionCreate, 7}} {
		if e := entries[i]; e.Action != want.action || e.AdminID != want.admin || e.ProductID != p.ID || !json.Valid(e.Change) {
			t.Fatalf("entry %d %+v, want %v", i, e, want)
		}
	}
	var created map[string]any
	if err := json.Unmarshal(entries[2].Change, &created); err != nil || created["saleEnd"] != nil || created["stock"] != 10.0 {
		t.Fatalf("create entry %s %v", entries[2].Change, err)
	}
	older, err := s.ListAudit(ctx, 0, entries[0].ID, 10)
	if err != nil || len(older) != 2 || older[0].ID != entries[1].ID {
		t.Fatalf("page below %d: %+v %v", entries[0].ID, older, err)
	}
}
