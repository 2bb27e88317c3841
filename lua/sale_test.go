package lua_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
)

// sale.lua writes the terms to existing shards only, keeps the latest
// version, never touches available; reserve.lua refuses while paused and
// treats limit 0 as no limit.
func TestWriteSaleAndPause(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	s := open(10)
	s.PerUserLimit = 0
	k := loadShard(t, rdb, 41, s)
	terms := lua.SaleTerms{ProductID: 41, Shards: 1, Version: 1, Price: 2500, PerUserLimit: 0, MaxPerOrder: 3,
		SaleStart: s.SaleStart, SaleEnd: s.SaleEnd, Paused: true}
	if ok, err := lua.WriteSale(ctx, rdb, k, terms); !ok || err != nil {
		t.Fatalf("pause: %v %v", ok, err)
	}
	r, err := reserve(rdb, k, "o1", 1, "r1", 1)
	if !errors.Is(err, lua.ErrPaused) || r.Available != 10 {
		t.Fatalf("paused reserve: %+v %v", r, err)
	}
	if n, _ := rdb.XLen(ctx, k.Intake()).Result(); n != 0 {
		t.Fatalf("paused reserve wrote %d intake entries", n)
	}
	// An older version arriving late changes nothing.
	stale := terms
	stale.Version, stale.Paused = 0, false
	if ok, err := lua.WriteSale(ctx, rdb, k, stale); ok || err != nil {
		t.Fatalf("stale write: %v %v", ok, err)
	}
	if _, err := reserve(rdb, k, "o1", 1, "r1", 1); !errors.Is(err, lua.ErrPaused) {
		t.Fatalf("after stale write: %v", err)
	}
	terms.Version, terms.Paused = 2, false
	if ok, err := lua.WriteSale(ctx, rdb, k, terms); !ok || err != nil {
		t.Fatalf("resume: %v %v", ok, err)
	}
	// Limit 0: one user takes more than any limit would allow, 3 per order.
	for i, rid := range []string{"a", "b", "c"} {
		r, err := reserve(rdb, k, "o"+rid, 1, rid, 3)
		if err != nil || r.Available != int64(10-3*(i+1)) {
			t.Fatalf("reserve %s: %+v %v", rid, r, err)
		}
	}
	h, _ := rdb.HGetAll(ctx, k.Stock()).Result()
	if h["price"] != "2500" || h["available"] != "1" || h["paused"] != "0" || h["sver"] != "2" {
		t.Fatalf("hash %v", h)
	}
	// Ending: the window closes at once.
	terms.Version, terms.SaleEnd = 3, time.Now().Add(-time.Millisecond)
	if ok, err := lua.WriteSale(ctx, rdb, k, terms); !ok || err != nil {
		t.Fatalf("end: %v %v", ok, err)
	}
	if _, err := reserve(rdb, k, "od", 2, "d", 1); !errors.Is(err, lua.ErrNotActive) {
		t.Fatalf("after end: %v", err)
	}
	// A shard that does not exist is never created.
	if _, err := lua.WriteSale(ctx, rdb, lua.ShardKeys(42, 0), terms); !errors.Is(err, lua.ErrNotFound) {
		t.Fatalf("missing shard: %v", err)
	}
	if n, _ := rdb.Exists(ctx, lua.ShardKeys(42, 0).Stock()).Result(); n != 0 {
		t.Fatal("sale.lua created a stock hash")
	}
}
