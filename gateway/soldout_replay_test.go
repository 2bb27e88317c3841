package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
)

// TestSoldOutReplaysOnEveryGateway (issue 19): with the sold-out cache
// answering from memory and its record lookups pipelined, every intent
// accepted before the sell-out — on either of two gateways — still answers
// 200 with its orderNo on both, also when the replays arrive all at once;
// a fresh intent gets 409; and a unit released after the sell-out sells
// again within SoldOutTTL, and that new intent's replay gets its orderNo at
// once on the gateway that accepted it and within SoldOutTTL on the other,
// although both hold the product sold out.
func TestSoldOutReplaysOnEveryGateway(t *testing.T) {
	const ttl = 2 * time.Second
	withTTL := func(c *Config) { c.SoldOutTTL = ttl }
	e := newEnv(t, withTTL)
	cfgB := baseConfig()
	cfgB.NodeID = 8
	withTTL(&cfgB)
	b, err := New(cfgB, e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hcB, _ := serveInMemory(t, b)
	gateways := []struct {
		name string
		hc   *http.Client
	}{{"A", e.hc}, {"B", hcB}}

	const buyers, shards = 40, 2
	spec := openSale(buyers)
	spec.Shards = shards
	pid := e.product(spec)
	nos := make(map[int64]string, buyers)
	for u := int64(1); u <= buyers; u++ {
		r := doHTTP(t, gateways[u%2].hc, "POST", "/api/orders", token(t, u), orderReq{pid, 1, fmt.Sprint("r-", u)})
		if r.status != 202 {
			t.Fatalf("buyer %d on %s: %s", u, gateways[u%2].name, r)
		}
		nos[u] = r.json(t)["orderNo"].(string)
	}
	for _, g := range gateways { // marks both caches
		doHTTP(t, g.hc, "POST", "/api/orders", token(t, 1000), orderReq{pid, 1, "late-" + g.name}).wantError(t, 409, CodeSoldOut)
	}

	// Every replay on every gateway at once: the lookups share pipelines.
	var wg sync.WaitGroup
	errs := make(chan string, 4*buyers)
	for _, g := range gateways {
		for u := int64(1); u <= buyers; u++ {
			wg.Go(func() {
				for range 3 {
					r := doHTTP(t, g.hc, "POST", "/api/orders", token(t, u), orderReq{pid, 1, fmt.Sprint("r-", u)})
					if r.status != 200 || r.json(t)["orderNo"] != nos[u] {
						errs <- fmt.Sprintf("buyer %d replay on %s: %s; want 200 with %s", u, g.name, r, nos[u])
						return
					}
				}
				r := doHTTP(t, g.hc, "POST", "/api/orders", token(t, u), orderReq{pid, 2, fmt.Sprint("r-", u)})
				if r.status != 422 {
					errs <- fmt.Sprintf("buyer %d, other quantity on %s: %s; want 422", u, g.name, r)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	if t.Failed() {
		return
	}
	for _, g := range gateways {
		doHTTP(t, g.hc, "POST", "/api/orders", token(t, 1001), orderReq{pid, 1, "fresh-" + g.name}).wantError(t, 409, CodeSoldOut)
	}

	// Buyer 1's unit comes back (a cancelled order's release): it sells again
	// within the bound, through one gateway or the other.
	k := lua.ShardKeys(pid, lua.HomeShard(1, shards))
	if ok, _, err := lua.Release(context.Background(), e.rdb, k, nos[1], 1, 1, time.Hour); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	released := time.Now()
	var soldOn int
	var newNo string
	for i := 0; ; i++ {
		g := gateways[i%2]
		// Buyer 2000's home shard may be the other one: the gateway moves
		// the unit there (shards.go).
		r := doHTTP(t, g.hc, "POST", "/api/orders", token(t, 2000), orderReq{pid, 1, "again"})
		if r.status == 202 {
			soldOn, newNo = i%2, r.json(t)["orderNo"].(string)
			break
		}
		r.wantError(t, 409, CodeSoldOut)
		if time.Since(released) > ttl+2*time.Second {
			t.Fatalf("released unit not sold within %v", ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sold := time.Now()
	t.Logf("released unit sold on %s %v after the release", gateways[soldOn].name, sold.Sub(released).Round(time.Millisecond))
	// The gateway that accepted it holds the product sold out again and
	// answers the new intent's replay at once: its own acceptance dropped its
	// copy of the shard's buyers (buyers.go).
	doHTTP(t, gateways[soldOn].hc, "POST", "/api/orders", token(t, 1002), orderReq{pid, 1, "after"}).wantError(t, 409, CodeSoldOut)
	if r := doHTTP(t, gateways[soldOn].hc, "POST", "/api/orders", token(t, 2000), orderReq{pid, 1, "again"}); r.status != 200 || r.json(t)["orderNo"] != newNo {
		t.Fatalf("replay on %s of the intent it accepted after the sell-out: %s; want 200 with %s", gateways[soldOn].name, r, newNo)
	}
	// The other gateway may still hold the product sold out with a copy of
	// the buyers read before the new acceptance: within the bound the new
	// intent's replay gets its order there too.
	other := gateways[1-soldOn]
	for {
		r := doHTTP(t, other.hc, "POST", "/api/orders", token(t, 2000), orderReq{pid, 1, "again"})
		if r.status == 200 && r.json(t)["orderNo"] == newNo {
			break
		}
		r.wantError(t, 409, CodeSoldOut)
		if time.Since(sold) > ttl+2*time.Second {
			t.Fatalf("replay on %s of the intent accepted on %s after the sell-out still %s %v after the acceptance; want 200 with %s within %v",
				other.name, gateways[soldOn].name, r, time.Since(sold), newNo, ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%s answered the replay %v after the acceptance", other.name, time.Since(sold).Round(time.Millisecond))
}

// TestReplayKeepsSoldOutMarked: on a one-shard product a replay that runs the
// script after the cache entry expired learns that the shard is empty and
// marks the product sold out again, so a storm of pure replays is answered
// by the record lookups; stock released later still sells within the bound.
func TestReplayKeepsSoldOutMarked(t *testing.T) {
	const ttl = 500 * time.Millisecond
	e := newEnv(t, func(c *Config) { c.SoldOutTTL = ttl })
	pid := e.product(openSale(1))
	no := e.accepted(71, pid, 1, "k-a")
	e.buy(72, pid, 1, "k-b").wantError(t, 409, CodeSoldOut)
	time.Sleep(ttl + 100*time.Millisecond) // the entry expires
	if r := e.buy(71, pid, 1, "k-a"); r.status != 200 || r.json(t)["orderNo"] != no {
		t.Fatalf("replay: %s", r)
	}
	if !e.srv.intake.SoldOut(pid, time.Now()) {
		t.Fatal("a replay that found the shard empty did not mark the product sold out")
	}
	k := lua.ShardKeys(pid, 0)
	if _, _, err := lua.Release(context.Background(), e.rdb, k, no, 71, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	for {
		r := e.buy(73, pid, 1, "k-c")
		if r.status == 202 {
			break
		}
		r.wantError(t, 409, CodeSoldOut)
		if time.Since(released) > ttl+2*time.Second {
			t.Fatalf("released unit not sold within %v", ttl)
		}
		// Replays while the unit is back do not mark the product again.
		if r := e.buy(71, pid, 1, "k-a"); r.status != 200 {
			t.Fatalf("replay after the release: %s", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
