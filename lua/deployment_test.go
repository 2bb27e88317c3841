package lua_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
)

// A stock hash carries its product's incarnation: loading a product with the
// same id and another incarnation (another database's, or one a MySQL
// restore forgot) is refused and leaves the hash as it was; the same
// incarnation refreshes it. Before incarnations load.lua kept any existing
// hash's available: the new product silently took over the old stock.
func TestLoadRefusesAnotherIncarnation(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := lua.ShardKeys(7, 0)
	old := open(100)
	old.Incarnation = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	loadShard(t, rdb, 7, old)
	if _, err := reserve(rdb, k, "o1", 1, "r1", 3); err != nil {
		t.Fatal(err)
	}
	before, err := rdb.HGetAll(ctx, k.Stock()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, inc := range []string{"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", ""} {
		s := open(5)
		s.Incarnation = inc
		_, _, err := lua.Load(ctx, rdb, k, s)
		var ie *lua.IncarnationError
		if !errors.Is(err, lua.ErrIncarnation) || !errors.As(err, &ie) || ie.Found != old.Incarnation || ie.Want != inc {
			t.Fatalf("load of incarnation %q over %q: %v, want an IncarnationError", inc, old.Incarnation, err)
		}
	}
	after, _ := rdb.HGetAll(ctx, k.Stock()).Result()
	if len(after) != len(before) || after["available"] != "97" || after["total"] != before["total"] || after["inc"] != old.Incarnation {
		t.Fatalf("refused load changed the hash: %v → %v", before, after)
	}
	// The same incarnation refreshes the terms and keeps available.
	same := open(1)
	same.Incarnation, same.Price = old.Incarnation, 2500
	created, avail, err := lua.Load(ctx, rdb, k, same)
	if err != nil || created || avail != 97 {
		t.Fatalf("refresh: created=%v avail=%d err=%v", created, avail, err)
	}
	// A hash without an incarnation (loaded before incarnations existed)
	// serves a product without one, and no product with one.
	k2 := lua.ShardKeys(8, 0)
	loadShard(t, rdb, 8, open(10))
	if _, _, err := lua.Load(ctx, rdb, k2, open(10)); err != nil {
		t.Fatalf("legacy refresh: %v", err)
	}
	s := open(10)
	s.Incarnation = "cccccccccccccccccccccccccccccccc"
	if _, _, err := lua.Load(ctx, rdb, k2, s); !errors.Is(err, lua.ErrIncarnation) {
		t.Fatalf("load with an incarnation over a hash without one: %v", err)
	}
}

// CheckUnused finds the stock hash and the intake entries of an earlier
// product with the id, on any of its possible shards.
func TestCheckUnused(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	if err := lua.CheckUnused(ctx, rdb, 9, "dd"); err != nil {
		t.Fatalf("fresh id: %v", err)
	}
	s := open(10)
	s.Incarnation = "ee"
	if _, _, err := lua.Load(ctx, rdb, lua.ShardKeys(9, 3), s); err != nil {
		t.Fatal(err)
	}
	if err := lua.CheckUnused(ctx, rdb, 9, "dd"); !errors.Is(err, lua.ErrIncarnation) {
		t.Fatalf("shard 3 hash of another incarnation: %v", err)
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: lua.ShardKeys(10, 1).Intake(), Values: map[string]any{"o": "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.CheckUnused(ctx, rdb, 10, "dd"); !errors.Is(err, lua.ErrIncarnation) {
		t.Fatalf("intake entries of an earlier product: %v", err)
	}
}

// An unmarked Redis DB is claimed; one that carries another identity is
// refused with both identities; Takeover refuses while reservations are
// live and hands the DB over (every Stampede key gone) once they are not.
func TestDeploymentClaimAndTakeover(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	claimed, err := lua.ClaimDeployment(ctx, rdb, "dep-a")
	if err != nil || !claimed {
		t.Fatalf("first claim: %v %v", claimed, err)
	}
	if claimed, err = lua.ClaimDeployment(ctx, rdb, "dep-a"); err != nil || claimed {
		t.Fatalf("same deployment again: %v %v", claimed, err)
	}
	_, err = lua.ClaimDeployment(ctx, rdb, "dep-b")
	var de *lua.DeploymentError
	if !errors.As(err, &de) || de.Ours != "dep-b" || de.Theirs != "dep-a" || !errors.Is(err, lua.ErrDeploymentMismatch) {
		t.Fatalf("claim by another deployment: %v", err)
	}

	// dep-a's product with one reservation in its intake stream.
	s := open(10)
	s.Incarnation = "ff"
	k := lua.ShardKeys(3, 0)
	if _, _, err := lua.Load(ctx, rdb, k, s); err != nil {
		t.Fatal(err)
	}
	rdb.SAdd(ctx, lua.StreamsKey, k.Intake())
	if _, err := reserve(rdb, k, "o1", 1, "r1", 1); err != nil {
		t.Fatal(err)
	}
	_, err = lua.Takeover(ctx, rdb, "dep-b")
	var le *lua.LiveError
	if !errors.As(err, &le) || le.Live.IntakeEntries != 1 || le.Live.OrderRecords != 1 {
		t.Fatalf("takeover with a live reservation: %v", err)
	}
	if v, _ := rdb.Get(ctx, lua.DeploymentKey).Result(); v != "dep-a" {
		t.Fatalf("refused takeover changed the identity to %q", v)
	}
	// dep-a's writer stores it: XACK+XDEL of the entry, DEL of the record.
	ids, _ := rdb.XRange(ctx, k.Intake(), "-", "+").Result()
	rdb.XDel(ctx, k.Intake(), ids[0].ID)
	rdb.Del(ctx, k.Order("o1"))
	deleted, err := lua.Takeover(ctx, rdb, "dep-b")
	if err != nil || deleted == 0 {
		t.Fatalf("takeover: deleted %d, %v", deleted, err)
	}
	keys, _ := rdb.Keys(ctx, "stampede:*").Result()
	if len(keys) != 1 || keys[0] != lua.DeploymentKey {
		t.Fatalf("keys left after the takeover: %v", keys)
	}
	if claimed, err := lua.ClaimDeployment(ctx, rdb, "dep-b"); err != nil || claimed {
		t.Fatalf("after takeover: %v %v", claimed, err)
	}
}
