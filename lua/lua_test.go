package lua_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
)

func loadShard(t testing.TB, rdb *redis.Client, pid int64, s lua.ShardStock) lua.Keys {
	t.Helper()
	k := lua.ShardKeys(pid, 0)
	created, avail, err := lua.Load(context.Background(), rdb, k, s)
	if err != nil || !created || avail != s.Available {
		t.Fatalf("load: created=%v avail=%d err=%v", created, avail, err)
	}
	return k
}

func open(avail int64) lua.ShardStock {
	now := time.Now()
	return lua.ShardStock{Available: avail, Total: avail, Price: 1999, PerUserLimit: 5, MaxPerOrder: 3,
		SaleStart: now.Add(-time.Hour), SaleEnd: now.Add(time.Hour)}
}

func reserve(rdb *redis.Client, k lua.Keys, no string, user int64, rid string, q int64) (lua.ReserveResult, error) {
	return lua.Reserve(context.Background(), rdb, k, lua.ReserveArgs{OrderNo: no, UserID: user, RequestID: rid, Quantity: q, TTL: time.Hour})
}

func TestReserveOutcomes(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := loadShard(t, rdb, 7, open(10))

	r, err := reserve(rdb, k, "o1", 1, "r1", 3)
	if err != nil || r.OrderNo != "o1" || r.Available != 7 {
		t.Fatalf("first reserve: %+v %v", r, err)
	}
	if n, _ := rdb.XLen(ctx, k.Intake()).Result(); n != 1 {
		t.Fatalf("intake length %d, want 1", n)
	}
	entry, _ := rdb.XRange(ctx, k.Intake(), "-", "+").Result()
	if v := entry[0].Values; v["o"] != "o1" || v["u"] != "1" || v["r"] != "r1" || v["q"] != "3" || v["pr"] != "1999" {
		t.Fatalf("stream entry %v", v)
	}
	// Replay: same orderNo back, nothing taken.
	r, err = reserve(rdb, k, "o1-other", 1, "r1", 3)
	if !errors.Is(err, lua.ErrDuplicate) || r.OrderNo != "o1" || r.Available != 7 {
		t.Fatalf("replay: %+v %v; want o1 with 7 available", r, err)
	}
	r, err = reserve(rdb, k, "o1-other", 1, "r1", 2)
	if !errors.Is(err, lua.ErrKeyReused) || r.OrderNo != "o1" {
		t.Fatalf("reuse: %+v %v", r, err)
	}
	if _, err = reserve(rdb, k, "o2", 1, "r2", 4); !errors.Is(err, lua.ErrBadQuantity) {
		t.Fatalf("quantity 4 > max 3: %v", err)
	}
	if _, err = reserve(rdb, k, "o2", 1, "r2", 0); !errors.Is(err, lua.ErrBadQuantity) {
		t.Fatalf("quantity 0: %v", err)
	}
	if _, err = reserve(rdb, k, "o2", 1, "r2", 3); !errors.Is(err, lua.ErrLimitExceeded) {
		t.Fatalf("limit 5 with 3 held: %v", err)
	}
	if _, err = reserve(rdb, k, "o3", 2, "r3", 3); err != nil { // 4 left
		t.Fatal(err)
	}
	if _, err = reserve(rdb, k, "o4", 3, "r4", 3); err != nil { // 1 left
		t.Fatal(err)
	}
	if _, err = reserve(rdb, k, "o5", 4, "r5", 2); !errors.Is(err, lua.ErrInsufficient) {
		t.Fatalf("2 of 1: %v", err)
	}
	if _, err = reserve(rdb, k, "o5", 4, "r5", 1); err != nil {
		t.Fatal(err)
	}
	if _, err = reserve(rdb, k, "o6", 5, "r6", 1); !errors.Is(err, lua.ErrSoldOut) {
		t.Fatalf("sold out: %v", err)
	}
	if _, err = reserve(rdb, lua.ShardKeys(99, 0), "o7", 5, "r7", 1); !errors.Is(err, lua.ErrNotFound) {
		t.Fatalf("unknown product: %v", err)
	}
	if n, _ := rdb.XLen(ctx, k.Intake()).Result(); n != 4 {
		t.Fatalf("intake length %d, want 4 (rejections write nothing)", n)
	}

	// Sale window on the Redis clock.
	s := open(5)
	s.SaleStart = time.Now().Add(time.Hour)
	kw := loadShard(t, rdb, 8, s)
	if _, err = reserve(rdb, kw, "o8", 1, "r8", 1); !errors.Is(err, lua.ErrNotActive) {
		t.Fatalf("before start: %v", err)
	}
}

func TestReleaseOnce(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua+8)
	ctx := context.Background()
	k := loadShard(t, rdb, 7, open(10))
	if _, err := reserve(rdb, k, "o1", 1, "r1", 3); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	released := 0
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, _, err := lua.Release(ctx, rdb, k, "o1", 1, 3, time.Hour)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				released++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if released != 1 {
		t.Fatalf("released %d times, want 1", released)
	}
	if a, _ := rdb.HGet(ctx, k.Stock(), "available").Int64(); a != 10 {
		t.Fatalf("available %d, want 10", a)
	}
	if held, _ := rdb.Get(ctx, k.User(1)).Int64(); held != 0 {
		t.Fatalf("user still holds %d", held)
	}
	if _, _, err := lua.Release(ctx, rdb, lua.ShardKeys(99, 0), "o9", 1, 1, time.Hour); !errors.Is(err, lua.ErrNotFound) {
		t.Fatalf("release on missing product: %v", err)
	}
}

func TestAdjustOnce(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua+9)
	ctx := context.Background()
	k := loadShard(t, rdb, 7, open(10))
	for i := range 3 {
		applied, avail, err := lua.Adjust(ctx, rdb, k, "rep-1", 5, time.Hour)
		if err != nil || applied != (i == 0) || avail != 15 {
			t.Fatalf("adjust #%d: applied=%v avail=%d err=%v", i, applied, avail, err)
		}
	}
	if _, _, err := lua.Adjust(ctx, rdb, k, "rep-2", -16, time.Hour); !errors.Is(err, lua.ErrNegativeAdjust) {
		t.Fatalf("negative: %v", err)
	}
	// Load refreshes metadata but never resets available.
	created, avail, err := lua.Load(ctx, rdb, k, open(10))
	if err != nil || created || avail != 15 {
		t.Fatalf("reload: created=%v avail=%d err=%v", created, avail, err)
	}
}

// TestReserveConcurrent: 1,000 buyers race for 100 units; exactly 100 win and
// available never goes below zero.
func TestReserveConcurrent(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua+10)
	k := loadShard(t, rdb, 7, open(100))
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, sold := 0, 0
	for u := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := reserve(rdb, k, fmt.Sprintf("o%d", u), int64(u+1), "r", 1)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, lua.ErrSoldOut):
				sold++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won != 100 || sold != 900 {
		t.Fatalf("won %d sold-out %d, want 100 and 900", won, sold)
	}
	if a, _ := rdb.HGet(context.Background(), k.Stock(), "available").Int64(); a != 0 {
		t.Fatalf("available %d", a)
	}
}

// TestKeysShareSlot: every key a script touches hashes to the shard's
// Redis Cluster slot (CRC16 of the hash tag, mod 16384).
func TestKeysShareSlot(t *testing.T) {
	if slot("foo") != 12182 || slot("{user1000}.following") != slot("user1000") {
		t.Fatalf("slot() disagrees with the cluster spec examples")
	}
	k := lua.ShardKeys(12345, 3)
	keys := []string{k.Stock(), k.Intake(), k.Request(1, "a:b"), k.User(1), k.Order("x"), k.Released("x"), k.Adjusted("x")}
	want := slot(keys[0])
	if want != slot("{p:12345:3}") {
		t.Fatalf("stock key %s not tagged", keys[0])
	}
	for _, key := range keys[1:] {
		if got := slot(key); got != want {
			t.Errorf("%s in slot %d, want %d", key, got, want)
		}
	}
	if slot(lua.ShardKeys(12345, 4).Stock()) == want && slot(lua.ShardKeys(12345, 5).Stock()) == want {
		t.Errorf("shards of one product all in one slot: tags do not differ")
	}
}

// slot is the Redis Cluster key slot (cluster spec: CRC16-XMODEM of the hash tag).
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// TestNoScriptAfterFlush: a flushed script cache is reloaded transparently.
func TestNoScriptAfterFlush(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua+11)
	ctx := context.Background()
	k := loadShard(t, rdb, 7, open(10))
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := reserve(rdb, k, "o1", 1, "r1", 1); err != nil {
		t.Fatalf("reserve after SCRIPT FLUSH: %v", err)
	}
}

// The per-user limit holds for the whole sale: the user's count lives
// until the sale's end (plus the request TTL), not for the request TTL
// alone (before, a buyer of a sale lasting longer than a day bought the
// limit again the next day); a sale open until sold out keeps it for ever
// in practice.
func TestPerUserLimitLastsTheWholeSale(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	for i, end := range []time.Time{time.Now().Add(72 * time.Hour), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)} {
		s := open(10)
		s.PerUserLimit, s.SaleEnd = 2, end
		k := lua.ShardKeys(int64(40+i), 0)
		if _, _, err := lua.Load(ctx, rdb, k, s); err != nil {
			t.Fatal(err)
		}
		if _, err := reserve(rdb, k, fmt.Sprintf("l%d", i), 7, "r1", 2); err != nil {
			t.Fatal(err)
		}
		// In seconds: 8,000 years overflow a time.Duration (and time.Until
		// saturates at 292 years, which the count outlives too).
		secs, err := rdb.Do(ctx, "TTL", k.User(7)).Int64()
		if err != nil || secs < int64(time.Until(end)/time.Second) {
			t.Fatalf("sale ending %v: the user's count lives %d s, want until the end", end, secs)
		}
		if _, err := reserve(rdb, k, fmt.Sprintf("m%d", i), 7, "r2", 1); !errors.Is(err, lua.ErrLimitExceeded) {
			t.Fatalf("past the limit: %v", err)
		}
	}
}
