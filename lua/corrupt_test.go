package lua_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
)

// A corrupt stock hash is a fault of that product's data, answered with
// ErrStockCorrupt (a *CorruptError naming the shard and the field), never
// with a bare Redis error, and nothing is written.
func TestReserveCorruptStockIsStockCorrupt(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	for _, field := range []string{"available", "price", "limit", "maxq", "start", "end"} {
		t.Run(field, func(t *testing.T) {
			k := lua.ShardKeys(700, 0)
			rdb.Del(ctx, k.Stock(), k.Intake())
			loadShard(t, rdb, 700, open(10))
			rdb.HSet(ctx, k.Stock(), field, "abc")
			_, err := reserve(rdb, k, "o1", 1, "r-"+field, 1)
			var ce *lua.CorruptError
			if !errors.Is(err, lua.ErrStockCorrupt) || !errors.As(err, &ce) || !strings.Contains(ce.Detail, field) || ce.Key != k.Tag() {
				t.Fatalf("reserve on %s=abc: %v, want ErrStockCorrupt naming %s", field, err, field)
			}
			if n, _ := rdb.XLen(ctx, k.Intake()).Result(); n != 0 {
				t.Fatalf("%d intake entries after a refused reserve", n)
			}
			if n, _ := rdb.Exists(ctx, k.Request(1, "r-"+field)).Result(); n != 0 {
				t.Fatal("idempotency record written by a refused reserve")
			}
		})
	}
	// A corrupt per-user counter and a corrupt idempotency record too.
	k := lua.ShardKeys(701, 0)
	loadShard(t, rdb, 701, open(10))
	rdb.Set(ctx, k.User(5), "x", 0)
	if _, err := reserve(rdb, k, "o2", 5, "r", 1); !errors.Is(err, lua.ErrStockCorrupt) {
		t.Fatalf("corrupt user counter: %v", err)
	}
	rdb.Set(ctx, k.Request(6, "r"), "garbage", 0)
	if _, err := reserve(rdb, k, "o3", 6, "r", 1); !errors.Is(err, lua.ErrStockCorrupt) {
		t.Fatalf("corrupt request record: %v", err)
	}
	// Healthy requests on the same shard still work.
	if _, err := reserve(rdb, k, "o4", 7, "r", 1); err != nil {
		t.Fatalf("healthy user on the same shard: %v", err)
	}
}

// A raw error a script raises on the shard's data (here WRONGTYPE: the
// stock key is a string) is ErrStockCorrupt too, for every script wrapper.
func TestScriptRuntimeErrorIsStockCorrupt(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := lua.ShardKeys(702, 0)
	rdb.Set(ctx, k.Stock(), "not a hash", 0)
	if _, err := reserve(rdb, k, "o1", 1, "r", 1); !errors.Is(err, lua.ErrStockCorrupt) {
		t.Fatalf("reserve on a string stock key: %v", err)
	}
	if _, _, err := lua.Release(ctx, rdb, k, "o1", 1, 1, time.Minute); !errors.Is(err, lua.ErrStockCorrupt) {
		t.Fatalf("release on a string stock key: %v", err)
	}
	if _, _, err := lua.Adjust(ctx, rdb, k, "fix-1", 1, time.Minute); !errors.Is(err, lua.ErrStockCorrupt) {
		t.Fatalf("adjust on a string stock key: %v", err)
	}
	// A connection failure is not corruption.
	dead := luatest.New(t, luatest.DBLua)
	dead.Close()
	if _, err := reserve(dead, k, "o1", 1, "r", 1); err == nil || errors.Is(err, lua.ErrStockCorrupt) {
		t.Fatalf("closed client: %v, want a plain error", err)
	}
}

// SetStatus moves the status a replay answers forward only, and only for
// the record's own order; the record keeps its TTL.
func TestReplayAnswersLastKnownStatus(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := loadShard(t, rdb, 703, open(10))
	if _, err := reserve(rdb, k, "o1", 1, "r1", 2); err != nil {
		t.Fatal(err)
	}
	replay := func() string {
		t.Helper()
		r, err := reserve(rdb, k, "o-new", 1, "r1", 2)
		if !errors.Is(err, lua.ErrDuplicate) || r.OrderNo != "o1" {
			t.Fatalf("replay: %+v %v", r, err)
		}
		return r.Status
	}
	if st := replay(); st != "PROCESSING" {
		t.Fatalf("status before any update %q", st)
	}
	steps := []struct {
		no, st string
		set    bool
		want   string
	}{
		{"o1", "WAITING_PAY", true, "WAITING_PAY"},
		{"o1", "PROCESSING", false, "WAITING_PAY"}, // late: never backwards
		{"o9", "CANCELLED", false, "WAITING_PAY"},  // another order's update
		{"o1", "PAID", true, "PAID"},
		{"o1", "CANCELLED", false, "PAID"}, // terminal stays
	}
	for _, s := range steps {
		set, err := lua.SetStatus(ctx, rdb, k, 1, "r1", s.no, s.st)
		if err != nil || set != s.set {
			t.Fatalf("SetStatus(%s, %s) = %v, %v; want %v", s.no, s.st, set, err, s.set)
		}
		if st := replay(); st != s.want {
			t.Fatalf("after %s %s: replay status %q, want %q", s.no, s.st, st, s.want)
		}
	}
	// Same quantity still required: another quantity is a reused key.
	if _, err := reserve(rdb, k, "o-new", 1, "r1", 1); !errors.Is(err, lua.ErrKeyReused) {
		t.Fatalf("other quantity: %v", err)
	}
	if ttl, _ := rdb.TTL(ctx, k.Request(1, "r1")).Result(); ttl < 59*time.Minute {
		t.Fatalf("record TTL %v after status updates, want the hour it was given", ttl)
	}
	// No record (expired): nothing is created.
	if set, err := lua.SetStatus(ctx, rdb, k, 2, "gone", "o2", "PAID"); err != nil || set {
		t.Fatalf("SetStatus without record = %v, %v", set, err)
	}
	if n, _ := rdb.Exists(ctx, k.Request(2, "gone")).Result(); n != 0 {
		t.Fatal("SetStatus created a record")
	}
}

// A waiting room whose counters are corrupt answers every request of a
// batch with ErrStockCorrupt naming the field, and writes nothing: no
// ticket, no place, no used proof-of-work.
func TestRoomTakeCorruptCounterIsStockCorrupt(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	for i, field := range []string{"issued", "pre", "expired", "owed"} {
		t.Run(field, func(t *testing.T) {
			pid := int64(710 + i)
			roomWith(t, rdb, pid, open(10), lua.RoomSettings{On: true, Window: time.Minute, PowCost: 1000})
			rdb.HSet(ctx, lua.Room(pid).State(), field, "abc")
			calls := []lua.TakeCall{
				{ProductID: pid, Args: lua.TakeArgs{UserID: 1, TicketID: "0000000000000001", PowChallenge: "c1", PowTTL: time.Minute}},
				{ProductID: pid, Args: lua.TakeArgs{UserID: 2, TicketID: "0000000000000002", PowChallenge: "c2", PowTTL: time.Minute}},
			}
			lua.TakeMany(ctx, rdb, calls)
			for _, c := range calls {
				var ce *lua.CorruptError
				if !errors.Is(c.Err, lua.ErrStockCorrupt) || !errors.As(c.Err, &ce) || !strings.Contains(ce.Detail, field) {
					t.Fatalf("take of user %d with %s=abc: %+v %v, want ErrStockCorrupt naming %s", c.Args.UserID, field, c.Place, c.Err, field)
				}
			}
			r := lua.Room(pid)
			if n, _ := rdb.Exists(ctx, r.Tickets(), r.Line(), r.Pow("c1"), r.Pow("c2")).Result(); n != 0 {
				t.Fatalf("%d of the tickets, the line and the proof-of-work marks written by a refused take", n)
			}
		})
	}
}
