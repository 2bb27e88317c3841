package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
)

// TestSoldOutCache: after SOLD_OUT the product is answered from memory (a
// restock is not seen at once), replays still get their order, and returned
// stock sells again within SoldOutTTL.
func TestSoldOutCache(t *testing.T) {
	// Long enough that the checks below run while the entry lives, even on a
	// loaded machine.
	const ttl = 2 * time.Second
	e := newEnv(t, func(c *Config) { c.SoldOutTTL = ttl })
	ctx := context.Background()
	pid := e.product(openSale(1))
	no := e.accepted(51, pid, 1, "so-a")
	e.buy(52, pid, 1, "so-b").wantError(t, 409, CodeSoldOut) // marks the cache

	// A unit comes back behind the gateway's back: the cache still answers
	// SOLD_OUT (it did not ask Redis)…
	k := lua.ShardKeys(pid, 0)
	if _, _, err := lua.Release(ctx, e.rdb, k, no, 51, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	e.buy(53, pid, 1, "so-c").wantError(t, 409, CodeSoldOut)
	// …while a replay of an accepted request still gets its order.
	r := e.buy(51, pid, 1, "so-a")
	if r.status != 200 || r.json(t)["orderNo"] != no {
		t.Fatalf("replay while cached sold out: %s; want 200 with %s", r, no)
	}
	e.buy(51, pid, 2, "so-a").wantError(t, 422, CodeIdempotencyKeyReused)

	// Within the TTL (plus scheduling slack) the released unit sells again.
	deadline := time.Now().Add(ttl + 2*time.Second)
	for i := 0; ; i++ {
		r := e.buy(54, pid, 1, "so-d")
		if r.status == 202 {
			break
		}
		r.wantError(t, 409, CodeSoldOut)
		if time.Now().After(deadline) {
			t.Fatalf("released unit not sold within %v of the release", ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a := e.available(pid, 0); a != 0 {
		t.Fatalf("available = %d; want 0", a)
	}
}
