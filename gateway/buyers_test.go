package gateway

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
)

// lookupCounter counts the request-record reads (GET, MGET) a client sends.
type lookupCounter struct{ n atomic.Int64 }

func (h *lookupCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lookupCounter) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if n := c.Name(); n == "get" || n == "mget" {
			h.n.Add(1)
		}
	}
}

func (h *lookupCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.count(cmd); return next(ctx, cmd) }
}

func (h *lookupCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.count(cmds...); return next(ctx, cmds) }
}

// gatewayWithCounter is a second gateway on e's Redis DB and MySQL whose
// Redis client counts request-record reads.
func gatewayWithCounter(t *testing.T, e *env, node int, mods ...func(*Config)) (*Server, *lookupCounter, *env) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: luatest.Addr(), DB: e.rdb.Options().DB})
	t.Cleanup(func() { _ = rdb.Close() })
	h := new(lookupCounter)
	rdb.AddHook(h)
	cfg := baseConfig()
	cfg.NodeID = node
	for _, m := range mods {
		m(&cfg)
	}
	srv, err := New(cfg, rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hc, ln := serveInMemory(t, srv)
	return srv, h, &env{t: t, rdb: e.rdb, store: e.store, srv: srv, hc: hc, ln: ln}
}

// waitBuyers waits until srv answers userID's sold-out requests for shard of
// pid from its copy of the buyers set.
func waitBuyers(t *testing.T, srv *Server, pid int64, shard int, userID int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !srv.intake.NonBuyer(pid, shard, userID, time.Now()) {
		if time.Now().After(deadline) {
			t.Fatalf("no copy of the buyers of product %d shard %d after 5s", pid, shard)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSoldOutBuyers (issue 19): once a product is sold out, a gateway answers
// users who hold no accepted intent for it from its copy of the buyers set,
// without reading Redis; a buyer's replay still reads the record and gets its
// orderNo on either gateway; a shard created before the set was kept
// (untracked) and a set larger than SoldOutBuyers leave every answer to the
// record lookups.
func TestSoldOutBuyers(t *testing.T) {
	const ttl = 2 * time.Second
	withTTL := func(c *Config) { c.SoldOutTTL = ttl }
	a := newEnv(t, withTTL)
	bSrv, lookups, b := gatewayWithCounter(t, a, 8, withTTL)

	const buyers, shards = 6, 2
	spec := openSale(buyers)
	spec.Shards = shards
	pid := a.product(spec)
	nos := make(map[int64]string, buyers)
	for u := int64(1); u <= buyers; u++ {
		g := a
		if u%2 == 0 {
			g = b
		}
		nos[u] = g.accepted(u, pid, 1, fmt.Sprint("r-", u))
	}
	a.buy(100, pid, 1, "late-a").wantError(t, 409, CodeSoldOut)
	b.buy(100, pid, 1, "late-b").wantError(t, 409, CodeSoldOut)
	for sh := range shards {
		waitBuyers(t, bSrv, pid, sh, 100_000+int64(sh))
		waitBuyers(t, a.srv, pid, sh, 100_000+int64(sh))
	}

	before := lookups.n.Load()
	for u := int64(200); u < 260; u++ {
		b.buy(u, pid, 1, "fresh").wantError(t, 409, CodeSoldOut)
	}
	if n := lookups.n.Load() - before; n != 0 {
		t.Fatalf("60 sold-out answers to users without an order read %d request records; want 0", n)
	}
	before = lookups.n.Load()
	for u := int64(1); u <= buyers; u++ {
		for _, g := range []*env{a, b} {
			if r := g.buy(u, pid, 1, fmt.Sprint("r-", u)); r.status != 200 || r.json(t)["orderNo"] != nos[u] {
				t.Fatalf("buyer %d replay: %s; want 200 with %s", u, r, nos[u])
			}
		}
		// A new intent of a buyer reads its record too: 409 after the read.
		b.buy(u, pid, 1, "more").wantError(t, 409, CodeSoldOut)
	}
	if n := lookups.n.Load() - before; n != 2*buyers {
		t.Fatalf("%d buyers' requests on B read %d request records; want %d", 2*buyers, n, 2*buyers)
	}

	// A unit comes back and another gateway sells it to user 500 (here: the
	// script, behind both gateways' backs) while B holds the product sold
	// out with a copy of the buyers read before: within the bound B answers
	// the new intent's replay with its orderNo (in between: 409).
	ctx := context.Background()
	home := lua.HomeShard(500, shards)
	k := lua.ShardKeys(pid, lua.HomeShard(1, shards))
	if ok, _, err := lua.Release(ctx, a.rdb, k, nos[1], 1, 1, time.Hour); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if lua.HomeShard(1, shards) != home { // the unit must be in user 500's home shard
		if _, err := a.rdb.HIncrBy(ctx, k.Stock(), "available", -1).Result(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.rdb.HIncrBy(ctx, lua.ShardKeys(pid, home).Stock(), "available", 1).Result(); err != nil {
			t.Fatal(err)
		}
	}
	waitBuyers(t, bSrv, pid, home, 500) // B's copy predates the acceptance
	newNo := a.srv.gen.Next(pid, home)
	if _, err := lua.Reserve(ctx, a.rdb, lua.ShardKeys(pid, home), lua.ReserveArgs{
		OrderNo: newNo, UserID: 500, RequestID: "resold", Quantity: 1, TTL: time.Hour}); err != nil {
		t.Fatalf("reserve the released unit: %v", err)
	}
	sold := time.Now()
	for {
		r := b.buy(500, pid, 1, "resold")
		if r.status == 200 && r.json(t)["orderNo"] == newNo {
			break
		}
		r.wantError(t, 409, CodeSoldOut)
		if time.Since(sold) > ttl+2*time.Second {
			t.Fatalf("B still answers %s %v after the acceptance; want 200 with %s within %v", r, time.Since(sold), newNo, ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("B answered the replay of an intent accepted elsewhere after the sell-out %v after the acceptance", time.Since(sold).Round(time.Millisecond))

	// Untracked: the shard's stock hash lost buyers = 1 (as one loaded
	// before reserve.lua kept the set). Once the copies age out, every hit
	// reads the record again, and replays still get their order.
	for sh := range shards {
		if err := a.rdb.HDel(context.Background(), lua.ShardKeys(pid, sh).Stock(), "buyers").Err(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(ttl + 5*time.Second)
	for bSrv.intake.NonBuyer(pid, 0, 100_000, time.Now()) || bSrv.intake.NonBuyer(pid, 1, 100_001, time.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("an untracked shard is still answered from the copy of its buyers")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)                          // reads in flight end
	b.buy(301, pid, 1, "fresh").wantError(t, 409, CodeSoldOut) // B holds the product sold out
	before = lookups.n.Load()
	b.buy(300, pid, 1, "fresh").wantError(t, 409, CodeSoldOut)
	if n := lookups.n.Load() - before; n != 1 {
		t.Fatalf("a sold-out answer on an untracked shard read %d request records; want 1", n)
	}
}

// TestSoldOutBuyersTooMany: a shard with more buyers than SoldOutBuyers is
// never answered from a copy; its replays and rejections are right.
func TestSoldOutBuyersTooMany(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SoldOutTTL = 2 * time.Second; c.SoldOutBuyers = 2 })
	pid := e.product(openSale(3))
	nos := make([]string, 4)
	for u := 1; u <= 3; u++ {
		nos[u] = e.accepted(int64(u), pid, 1, "t")
	}
	e.buy(9, pid, 1, "t").wantError(t, 409, CodeSoldOut)
	for range 20 {
		if e.srv.intake.NonBuyer(pid, 0, 9, time.Now()) {
			t.Fatal("a set of 3 buyers is answered from a copy with SoldOutBuyers 2")
		}
		for u := 1; u <= 3; u++ {
			if r := e.buy(int64(u), pid, 1, "t"); r.status != 200 || r.json(t)["orderNo"] != nos[u] {
				t.Fatalf("buyer %d replay: %s; want 200 with %s", u, r, nos[u])
			}
		}
		e.buy(10, pid, 1, "t").wantError(t, 409, CodeSoldOut)
		time.Sleep(10 * time.Millisecond)
	}
}
