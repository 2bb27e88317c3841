package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

// TestSweeperRepairsTransfers: with nobody buying, the sweeper's round
// completes a transfer whose mover died between its two steps (it moved here
// from the gateway's background loop: the sweeper runs every repair).
func TestSweeperRepairsTransfers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now()
	p, err := e.store.CreateProduct(ctx, persistence.Product{Name: fmt.Sprintf("sharded-%d", now.UnixNano()), Price: 100,
		Total: 10, Shards: 2, MaxPerOrder: 5, SaleStart: now.Add(-time.Hour), SaleEnd: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	st := &lua.Sharded{RDB: e.rdb, Do: func(fn func(context.Context) error) error { return fn(ctx) }}
	if err := st.LoadProduct(lua.Product{ID: p.ID, Total: 10, Shards: 2, Price: 100, MaxPerOrder: 5,
		SaleStart: p.SaleStart, SaleEnd: p.SaleEnd}); err != nil {
		t.Fatal(err)
	}
	if moved, err := lua.TransferOut(ctx, e.rdb, lua.ShardKeys(p.ID, 0), "dead-mover", 1, 3); err != nil || moved != 3 {
		t.Fatalf("TransferOut: %d, %v", moved, err)
	}
	e.rdb.Del(ctx, lua.ReconcileMarkKey)
	sw, err := pipeline.NewSweeper(e.store, pipeline.SweeperConfig{Redis: e.rdb, ReconcileInterval: time.Second, LostGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !sw.ReconcileRound(ctx) {
		t.Fatal("reconcile round did not run")
	}
	if a0, a1 := e.redisAvailable(lua.ShardKeys(p.ID, 0)), e.redisAvailable(lua.ShardKeys(p.ID, 1)); a0 != 2 || a1 != 8 {
		t.Fatalf("shards hold %d, %d after the round; want 2, 8", a0, a1)
	}
	if n, err := pipeline.RepairTransfers(ctx, e.rdb, e.store); err != nil || n != 0 {
		t.Fatalf("second repair: %d, %v; want nothing left", n, err)
	}
}
