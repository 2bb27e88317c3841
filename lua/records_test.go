package lua_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
	"github.com/stampede-sh/stampede/order"
)

// TestRecordCodecs: what reserve.lua writes is what the codecs read — the
// intake entry (ParseReservation), the pending order hash (ReadPendingOrder)
// and the idempotency record (ParseRequestRecord); a missing record is
// ErrNoRecord and a malformed one ErrStockCorrupt.
func TestRecordCodecs(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	gen, err := order.NewNoGenerator(1)
	if err != nil {
		t.Fatal(err)
	}
	const pid = 41
	k := loadShard(t, rdb, pid, open(10))
	no := gen.Next(pid, 0)
	if _, err := reserve(rdb, k, no, 5, "rq-1", 2); err != nil {
		t.Fatal(err)
	}

	entries, err := rdb.XRange(ctx, k.Intake(), "-", "+").Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("intake: %v %v", entries, err)
	}
	r, err := lua.ParseReservation(entries[0].Values)
	if err != nil || r.OrderNo != no || r.UserID != 5 || r.RequestID != "rq-1" || r.ProductID != pid || r.Shard != 0 ||
		r.Quantity != 2 || r.UnitPrice != 1999 || time.Since(r.AcceptedAt) > time.Minute {
		t.Fatalf("reservation %+v %v", r, err)
	}
	// The gateway's sync-intake XADD writes the same entry.
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Intake(), Values: lua.ReservationValues(r)}).Result()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := rdb.XRange(ctx, k.Intake(), id, id).Result()
	if r2, err := lua.ParseReservation(again[0].Values); err != nil || r2 != r {
		t.Fatalf("ReservationValues round trip: %+v %v; want %+v", r2, err, r)
	}

	p, err := lua.ReadPendingOrder(ctx, rdb, k, no)
	if err != nil || p.UserID != 5 || p.RequestID != "rq-1" || p.Quantity != 2 || p.UnitPrice != 1999 ||
		p.AcceptedMs != r.AcceptedAt.UnixMilli() {
		t.Fatalf("pending order %+v %v", p, err)
	}
	if _, err := lua.ReadPendingOrder(ctx, rdb, k, "no-such-order"); !errors.Is(err, lua.ErrNoRecord) {
		t.Fatalf("missing record: %v; want ErrNoRecord", err)
	}
	rdb.HSet(ctx, k.Order(no), lua.FieldQuantity, "two")
	if _, err := lua.ReadPendingOrder(ctx, rdb, k, no); !errors.Is(err, lua.ErrStockCorrupt) {
		t.Fatalf("malformed record: %v; want ErrStockCorrupt", err)
	}

	v, err := rdb.Get(ctx, k.Request(5, "rq-1")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if rec, ok := lua.ParseRequestRecord(v); !ok || rec != (lua.RequestRecord{OrderNo: no, Quantity: "2"}) {
		t.Fatalf("request record %q: %+v %v", v, rec, ok)
	}
	if _, err := lua.SetStatus(ctx, rdb, k, 5, "rq-1", no, "WAITING_PAY"); err != nil {
		t.Fatal(err)
	}
	v, _ = rdb.Get(ctx, k.Request(5, "rq-1")).Result()
	if rec, ok := lua.ParseRequestRecord(v); !ok || rec != (lua.RequestRecord{OrderNo: no, Quantity: "2", Status: "WAITING_PAY"}) {
		t.Fatalf("request record %q: %+v %v", v, rec, ok)
	}
	if _, ok := lua.ParseRequestRecord("garbage"); ok {
		t.Fatal("a value without a space parsed as a request record")
	}
}

// TestShardShareAndHome: shares add up to the total, the first shards take
// the remainder, and a user's home shard is stable and in range.
func TestShardShareAndHome(t *testing.T) {
	for _, c := range []struct {
		total int64
		n     int
		want  []int64
	}{{10, 1, []int64{10}}, {10, 3, []int64{4, 3, 3}}, {2, 4, []int64{1, 1, 0, 0}}} {
		var sum int64
		for sh := range c.n {
			if got := lua.ShardShare(c.total, c.n, sh); got != c.want[sh] {
				t.Errorf("ShardShare(%d, %d, %d) = %d; want %d", c.total, c.n, sh, got, c.want[sh])
			}
			sum += lua.ShardShare(c.total, c.n, sh)
		}
		if sum != c.total {
			t.Errorf("shares of %d over %d add up to %d", c.total, c.n, sum)
		}
	}
	for u := range int64(1000) {
		if h := lua.HomeShard(u, 7); h < 0 || h >= 7 || h != lua.HomeShard(u, 7) {
			t.Fatalf("HomeShard(%d, 7) = %d", u, h)
		}
	}
}
