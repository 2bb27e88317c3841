package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

func TestHomeShardSpreads(t *testing.T) {
	var n [4]int
	for u := range int64(4000) {
		n[lua.HomeShard(u, 4)]++
	}
	for sh, c := range n {
		if c < 800 || c > 1200 {
			t.Fatalf("shard %d homes %d of 4000 users: %v", sh, c, n)
		}
	}
	if first := lua.HomeShard(12345, 7); lua.HomeShard(12345, 1) != 0 || lua.HomeShard(12345, 7) != first {
		t.Fatal("homeShard is not deterministic")
	}
}

// TestShardedSaleSellsEveryUnit: 3,000 buyers for 1,000 units over 4 shards.
// Exactly 1,000 are accepted, every shard ends at 0 (units moved between
// shards, none stranded), and the docs/spec.md §5 stock checks hold.
func TestShardedSaleSellsEveryUnit(t *testing.T) {
	if testing.Short() {
		t.Skip("3,000 requests")
	}
	e := newEnv(t, func(c *Config) { c.SoldOutTTL = 200 * time.Millisecond })
	ctx := context.Background()
	spec := openSale(1000)
	spec.Shards = 4
	pid := e.product(spec)
	for sh := range 4 {
		if a := e.available(pid, sh); a != 250 {
			t.Fatalf("shard %d starts with %d; want 250", sh, a)
		}
	}

	const buyers = 3000
	var accepted, soldOut, other atomic.Int64
	var mu sync.Mutex
	nos := map[string]bool{}
	jobs := make(chan int64)
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			for u := range jobs {
				r := e.buy(u, pid, 1, "shard-sale")
				switch {
				case r.status == 202:
					accepted.Add(1)
					no := r.json(t)["orderNo"].(string)
					_, sh, _, _ := order.ParseNo(no)
					if sh != lua.HomeShard(u, 4) {
						t.Errorf("user %d's order %s is in shard %d, not its home %d", u, no, sh, lua.HomeShard(u, 4))
					}
					mu.Lock()
					nos[no] = true
					mu.Unlock()
				case r.status == 409 && strings.Contains(string(r.body), CodeSoldOut):
					soldOut.Add(1)
				default:
					other.Add(1)
					t.Errorf("user %d: %s", u, r)
				}
			}
		})
	}
	for u := range int64(buyers) {
		jobs <- 100_000 + u
	}
	close(jobs)
	wg.Wait()
	if accepted.Load() != 1000 || soldOut.Load() != 2000 || len(nos) != 1000 {
		t.Fatalf("accepted %d (distinct orderNos %d), sold out %d, other %d; want 1000, 2000",
			accepted.Load(), len(nos), soldOut.Load(), other.Load())
	}
	for sh := range 4 {
		if a := e.available(pid, sh); a != 0 {
			t.Errorf("shard %d has %d units left", sh, a)
		}
		if n, _ := e.rdb.HLen(ctx, lua.ShardKeys(pid, sh).Transfers()).Result(); n != 0 {
			t.Errorf("shard %d has %d transfers in flight", sh, n)
		}
	}

	// Do what the writers do (every shard's stream into MySQL), then audit.
	var batch []order.Reservation
	for sh := range 4 {
		k := lua.ShardKeys(pid, sh)
		entries, err := e.rdb.XRange(ctx, k.Intake(), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range entries {
			r, err := lua.ParseReservation(en.Values)
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, r)
		}
		e.rdb.Del(ctx, k.Intake())
	}
	if len(batch) != 1000 {
		t.Fatalf("%d intake entries; want 1000", len(batch))
	}
	if _, err := e.store.InsertReservations(ctx, batch, map[int64]string{pid: spec.Name}); err != nil {
		t.Fatal(err)
	}
	rep, err := pipeline.Reconcile(ctx, e.rdb, e.store, []int64{pid})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Products[0].Checks {
		if strings.HasPrefix(c.Name, "5") { // the orders are PROCESSING: no consumer here
			continue
		}
		if !c.OK {
			t.Errorf("reconcile %q failed: %s", c.Name, c.Detail)
		}
	}
}

// TestShardedTransferCrashRepaired: transfers whose mover died after the
// first step hold units in no shard; the gateway completes them before it
// calls the product sold out, so every unit is still sold, once.
func TestShardedTransferCrashRepaired(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	spec := openSale(2)
	spec.Shards = 2
	pid := e.product(spec)
	// Both units leave their shards and never arrive.
	for sh := range 2 {
		moved, err := lua.TransferOut(ctx, e.rdb, lua.ShardKeys(pid, sh), fmt.Sprintf("dead-mover-%d", sh), 1-sh, 1)
		if err != nil || moved != 1 {
			t.Fatalf("TransferOut: %d, %v", moved, err)
		}
	}
	if e.available(pid, 0)+e.available(pid, 1) != 0 {
		t.Fatal("units should be in flight")
	}
	e.accepted(201, pid, 1, "crash-a")
	e.accepted(202, pid, 1, "crash-b")
	e.buy(203, pid, 1, "crash-c").wantError(t, 409, CodeSoldOut)
	if a0, a1 := e.available(pid, 0), e.available(pid, 1); a0 != 0 || a1 != 0 {
		t.Fatalf("available %d, %d; want 0, 0", a0, a1)
	}
}

// TestShardedIdempotencyAndLimit: a user's replays and per-user limit live in
// the home shard, whichever shard has the stock.
func TestShardedIdempotencyAndLimit(t *testing.T) {
	e := newEnv(t)
	spec := openSale(8)
	spec.Shards, spec.PerUserLimit, spec.MaxPerOrder = 8, 2, 2
	pid := e.product(spec)
	const user = 301
	no := e.accepted(user, pid, 2, "lim-1") // needs a pull: one unit per shard
	for range 3 {
		r := e.buy(user, pid, 2, "lim-1")
		if r.status != 200 || r.json(t)["orderNo"] != no {
			t.Fatalf("replay: %s; want 200 with %s", r, no)
		}
	}
	e.buy(user, pid, 1, "lim-2").wantError(t, 409, CodePurchaseLimitExceeded)
	var sum int64
	for sh := range 8 {
		sum += e.available(pid, sh)
	}
	if sum != 6 {
		t.Fatalf("%d units left over the shards; want 6", sum)
	}
}
