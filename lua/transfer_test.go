package lua_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
)

func TestMoveBetweenShards(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	const pid = 9101
	k0 := loadShard(t, rdb, pid, open(10))
	k1 := lua.ShardKeys(pid, 1)
	if _, _, err := lua.Load(ctx, rdb, k1, open(0)); err != nil {
		t.Fatal(err)
	}
	moved, err := lua.Move(ctx, rdb, pid, 0, 1, "x1", 4, time.Hour)
	if err != nil || moved != 4 {
		t.Fatalf("Move = %d, %v; want 4", moved, err)
	}
	// More than the donor has: what is left.
	moved, err = lua.Move(ctx, rdb, pid, 0, 1, "x2", 100, time.Hour)
	if err != nil || moved != 6 {
		t.Fatalf("Move = %d, %v; want 6", moved, err)
	}
	moved, err = lua.Move(ctx, rdb, pid, 0, 1, "x3", 1, time.Hour)
	if err != nil || moved != 0 {
		t.Fatalf("Move from a dry shard = %d, %v; want 0", moved, err)
	}
	if a0, a1 := avail(t, rdb, k0), avail(t, rdb, k1); a0 != 0 || a1 != 10 {
		t.Fatalf("available = %d, %d; want 0, 10", a0, a1)
	}
	if n, _ := rdb.HLen(ctx, k0.Transfers()).Result(); n != 0 {
		t.Fatalf("%d transfer records left", n)
	}
}

// TestTransferCrashBetweenSteps: a mover that dies after transfer_out leaves
// its units in flight; RepairTransfers applies them once, however often it
// runs and even if the original mover completes too.
func TestTransferCrashBetweenSteps(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	const pid = 9102
	k0 := loadShard(t, rdb, pid, open(10))
	k1 := lua.ShardKeys(pid, 1)
	if _, _, err := lua.Load(ctx, rdb, k1, open(0)); err != nil {
		t.Fatal(err)
	}
	moved, err := lua.TransferOut(ctx, rdb, k0, "crash", 1, 7)
	if err != nil || moved != 7 {
		t.Fatalf("TransferOut = %d, %v", moved, err)
	}
	// Replaying the first step with the same id takes nothing more.
	if again, err := lua.TransferOut(ctx, rdb, k0, "crash", 1, 7); err != nil || again != 0 {
		t.Fatalf("TransferOut replay = %d, %v; want 0", again, err)
	}
	if a0, a1 := avail(t, rdb, k0), avail(t, rdb, k1); a0 != 3 || a1 != 0 {
		t.Fatalf("in flight: available = %d, %d; want 3, 0", a0, a1)
	}
	for range 3 {
		if _, err := lua.RepairTransfers(ctx, rdb, pid, 2, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// The original mover wakes up and completes as well: no double.
	if err := lua.CompleteTransfer(ctx, rdb, pid, 0, lua.Transfer{ID: "crash", To: 1, Units: 7}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if a0, a1 := avail(t, rdb, k0), avail(t, rdb, k1); a0 != 3 || a1 != 7 {
		t.Fatalf("after repair: available = %d, %d; want 3, 7", a0, a1)
	}
	if ts, _ := lua.PendingTransfers(ctx, rdb, k0); len(ts) != 0 {
		t.Fatalf("pending after repair: %v", ts)
	}
}

func TestReserveSyncSkipsStream(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := loadShard(t, rdb, 9103, open(5))
	res, err := lua.Reserve(ctx, rdb, k, lua.ReserveArgs{OrderNo: "o1", UserID: 1, RequestID: "r1", Quantity: 2, TTL: time.Hour, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Available != 3 || res.UnitPrice == 0 || res.AcceptedAt.IsZero() {
		t.Fatalf("sync reserve = %+v", res)
	}
	if n, _ := rdb.XLen(ctx, k.Intake()).Result(); n != 0 {
		t.Fatalf("sync reserve appended %d stream entries", n)
	}
	if _, err := lua.Reserve(ctx, rdb, k, lua.ReserveArgs{OrderNo: "o2", UserID: 1, RequestID: "r1", Quantity: 2, TTL: time.Hour, Sync: true}); err != lua.ErrDuplicate { //nolint:errorlint // the bare sentinel, not a wrapped one: the gateway answers those without allocating
		t.Fatalf("replay = %v; want ErrDuplicate", err)
	}
}

func avail(t *testing.T, rdb *redis.Client, k lua.Keys) int64 {
	t.Helper()
	n, err := rdb.HGet(context.Background(), k.Stock(), "available").Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReserveManyAfterFlush: a pipelined batch meets a flushed script cache
// (NOSCRIPT), reloads and answers every call as Reserve would, a duplicate
// inside the batch included.
func TestReserveManyAfterFlush(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := loadShard(t, rdb, 9104, open(2))
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	args := func(no string, user int64, rid string) lua.ReserveArgs {
		return lua.ReserveArgs{OrderNo: no, UserID: user, RequestID: rid, Quantity: 1, TTL: time.Hour}
	}
	calls := []lua.ReserveCall{
		{Keys: k, Args: args("o1", 1, "a")},
		{Keys: k, Args: args("o2", 1, "a")}, // same intent: duplicate of o1
		{Keys: k, Args: args("o3", 2, "b")},
		{Keys: k, Args: args("o4", 3, "c")}, // no stock left
	}
	lua.ReserveMany(ctx, rdb, calls)
	if calls[0].Err != nil || calls[0].Result.OrderNo != "o1" {
		t.Fatalf("call 0: %+v", calls[0])
	}
	if calls[1].Err != lua.ErrDuplicate || calls[1].Result.OrderNo != "o1" { //nolint:errorlint // the bare sentinel, not a wrapped one: the gateway answers those without allocating
		t.Fatalf("call 1: %+v", calls[1])
	}
	if calls[2].Err != nil || calls[3].Err != lua.ErrSoldOut { //nolint:errorlint // the bare sentinel, not a wrapped one: the gateway answers those without allocating
		t.Fatalf("calls 2, 3: %+v %+v", calls[2], calls[3])
	}
	if n, _ := rdb.XLen(ctx, k.Intake()).Result(); n != 2 {
		t.Fatalf("%d intake entries; want 2", n)
	}
}
