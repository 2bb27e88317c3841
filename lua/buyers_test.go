package lua_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
)

// TestBuyers (issue 19): reserve.lua adds the user of every acceptance to the
// shard's buyers set (and only of acceptances); buyers.lua sends it, answers
// UNCHANGED for the caller's copy while it is the set, MEMBERS again once it
// grew or was recreated with as many members, TOO_MANY above the limit, and
// UNTRACKED for a shard not created by this Load.
func TestBuyers(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := loadShard(t, rdb, 41, open(3))

	r, err := lua.Buyers(ctx, rdb, k, 0, "", 10)
	if err != nil || r.State != lua.BuyersUnchanged || r.Count != 0 {
		t.Fatalf("no buyers yet: %+v %v; want UNCHANGED 0", r, err)
	}
	if _, err := reserve(rdb, k, "o1", 5, "r1", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := reserve(rdb, k, "o1-again", 5, "r1", 1); err == nil { // a replay adds nothing
		t.Fatal("replay reserved")
	}
	if _, err := reserve(rdb, k, "o2", 5, "r2", 1); err != nil { // the same user again
		t.Fatal(err)
	}
	if _, err := reserve(rdb, k, "o3", 6, "r3", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := reserve(rdb, k, "o4", 7, "r4", 1); err == nil { // sold out: not a buyer
		t.Fatal("reserved past the stock")
	}
	r, err = lua.Buyers(ctx, rdb, k, 0, "", 10)
	slices.Sort(r.Users)
	if err != nil || r.State != lua.BuyersMembers || !slices.Equal(r.Users, []int64{5, 6}) || r.Incarnation != "eo1" || r.Count != 3 {
		t.Fatalf("buyers: %+v %v; want users 5, 6, incarnation eo1, count 3", r, err)
	}
	if ttl, _ := rdb.TTL(ctx, k.Buyers()).Result(); ttl <= 0 {
		t.Fatalf("buyers set TTL %v; want the records' TTL", ttl)
	}
	if got, err := lua.Buyers(ctx, rdb, k, r.Count, r.Incarnation, 10); err != nil || got.State != lua.BuyersUnchanged {
		t.Fatalf("unchanged copy: %+v %v", got, err)
	}
	if got, err := lua.Buyers(ctx, rdb, k, 0, "", 2); err != nil || got.State != lua.BuyersTooMany || got.Count != 3 {
		t.Fatalf("limit 2: %+v %v; want TOO_MANY 3", got, err)
	}

	// The set expires and is created again with as many members: the copy
	// is not taken for it.
	if err := rdb.Del(ctx, k.Buyers()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := lua.Release(ctx, rdb, k, "o1", 5, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := reserve(rdb, k, "o5", 8, "r5", 1); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.SCard(ctx, k.Buyers()).Result(); n != 2 {
		t.Fatalf("recreated set has %d members", n)
	}
	if _, err := reserve(rdb, k, "o6", 9, "r6", 1); err == nil {
		t.Fatal("reserved past the stock")
	}
	got, err := lua.Buyers(ctx, rdb, k, 2, r.Incarnation, 10)
	if err != nil || got.State != lua.BuyersMembers || !slices.Equal(got.Users, []int64{8}) || got.Incarnation != "eo5" {
		t.Fatalf("recreated set: %+v %v; want MEMBERS of user 8, incarnation eo5", got, err)
	}

	// A reservation restored after Redis lost it (restore.lua) adds its user.
	if ok, err := lua.Restore(ctx, rdb, k, "o7", 10, "r7", 1, "WAITING_PAY", time.Hour); err != nil || !ok {
		t.Fatalf("restore: %v %v", ok, err)
	}
	if in, _ := rdb.SIsMember(ctx, k.Buyers(), "10").Result(); !in {
		t.Fatal("a restored reservation's user is not in the buyers set")
	}

	// A shard whose stock hash was created before reserve.lua kept the set.
	if err := rdb.HDel(ctx, k.Stock(), "buyers").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := lua.Buyers(ctx, rdb, k, 0, "", 10); err != nil || got.State != lua.BuyersUntracked {
		t.Fatalf("untracked shard: %+v %v", got, err)
	}
	none := lua.ShardKeys(42, 0)
	if got, err := lua.Buyers(ctx, rdb, none, 0, "", 10); err != nil || got.State != lua.BuyersUntracked {
		t.Fatalf("no stock hash: %+v %v", got, err)
	}
}
