package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

// Issue 8 "Scale-out": Stampede on a real 3-master Redis Cluster, only the
// Redis address list changed.

// TestScaleRedisCluster runs a concurrent sale over 30 products whose hash
// tags cover all three masters and one hot product whose shards do, with
// replays, through a gateway process and a pipeline process that only know
// the three seed addresses. docs/spec.md §5 must hold for every product, every
// answered intent must be exactly one order, no buyer may see a 5xx or a
// transport error, and Redis stock must never go negative.
func TestScaleRedisCluster(t *testing.T) {
	t.Parallel()
	e, cl := newClusterEnv(t)
	cs := startClusterSale(t, e, cl, clusterSaleSpec{products: 30, stock: 8, buyers: 16, hotShards: 8, hotStock: 96, hotBuyers: 192})
	cs.run(saleRun{workers: 24})
	cs.check()
}

// TestScaleRedisClusterSlotMove runs the same kind of sale and, while it goes
// on, moves the hash slot of the busiest product, then the slot of one of the
// hot product's shards, to another master by the resharding protocol
// (IMPORTING/MIGRATING, MIGRATE … KEYS in batches, SETSLOT NODE on every
// master). Its gateway pipelines concurrent reserve calls
// (--reserve-pipeline), where go-redis does not retry TRYAGAIN by itself.
// Besides the invariants of TestScaleRedisCluster, the moved keys
// must end on the new master and both products must go on selling after
// their move.
func TestScaleRedisClusterSlotMove(t *testing.T) {
	t.Parallel()
	e, cl := newClusterEnv(t)
	cs := startClusterSale(t, e, cl, clusterSaleSpec{products: 12, stock: 8, buyers: 16, hotShards: 6, hotStock: 120, hotBuyers: 240,
		busyStock: 150, busyBuyers: 300, gatewayArgs: []string{"--reserve-pipeline", "32"}})
	busyKeys := lua.ShardKeys(cs.busy, 0)
	// The hot shard to move: one on another master than the busy product.
	hotShard := -1
	for sh := range cs.spec.hotShards {
		if cs.owners[lua.ShardKeys(cs.hot, sh).Tag()] != cs.owners[busyKeys.Tag()] {
			hotShard = sh
			break
		}
	}
	if hotShard < 0 {
		t.Fatal("no hot shard on another master than the busy product") // cannot happen: hot shards cover all masters
	}
	hotKeys := lua.ShardKeys(cs.hot, hotShard)
	moves := []struct {
		name string
		keys lua.Keys
		pid  int64
		at   float64 // start when this fraction of the buyers is answered
	}{{fmt.Sprintf("hot shard %d", hotShard), hotKeys, cs.hot, 0.15}, {"busy product", busyKeys, cs.busy, 0.3}}

	type moveResult struct {
		slot     int64
		from, to *clusterNode
		keys     int
		took     time.Duration
		end      time.Time
	}
	results := make([]moveResult, len(moves))
	var moveErr error
	var moveWG sync.WaitGroup
	moveWG.Go(func() {
		for i, m := range moves {
			// Both products still have stock then (each sells out about
			// half way through the sale).
			for cs.answered.Load() < int64(m.at*float64(cs.total)) {
				if e.ctx.Err() != nil {
					moveErr = e.ctx.Err()
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			slot := cs.slotOf(m.keys)
			from := cs.owners[m.keys.Tag()]
			to := cl.nodes[(indexOf(cl.nodes, from)+1)%len(cl.nodes)]
			start := time.Now()
			n, err := cl.migrateSlot(e.ctx, slot, to, 20, 2*time.Millisecond)
			if err != nil {
				moveErr = fmt.Errorf("move %s (slot %d) from %s to %s: %w", m.name, slot, from.addr(), to.addr(), err)
				return
			}
			results[i] = moveResult{slot: slot, from: from, to: to, keys: n, took: time.Since(start), end: time.Now()}
			t.Logf("moved %s: slot %d, %d keys, %s → %s in %s, at %d/%d answered", m.name, slot, n, from.addr(), to.addr(),
				results[i].took.Round(time.Millisecond), cs.answered.Load(), cs.total)
		}
	})
	cs.run(saleRun{workers: 24, pace: 2 * time.Millisecond})
	moveWG.Wait()
	if moveErr != nil {
		t.Fatal(moveErr)
	}
	ctx := e.ctx
	// What the clients met during the moves (Redis 7 INFO errorstats).
	redirects := map[string]int{}
	for _, n := range cl.nodes {
		info, err := n.rdb.Info(ctx, "errorstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\n") {
			var name string
			var count int
			if k, v, ok := strings.Cut(strings.TrimSpace(l), ":count="); ok {
				name = strings.TrimPrefix(k, "errorstat_")
				fmt.Sscan(v, &count)
				redirects[name] += count
			}
		}
	}
	t.Logf("error replies of the cluster (handled by the clients; ERR: ordinary errors such as XINFO of a missing stream): %v", redirects)
	if redirects["TRYAGAIN"]+redirects["ASK"] == 0 {
		t.Error("no request met a slot in migration (no TRYAGAIN or ASK answered): the moves did not overlap the sale")
	}
	for i, m := range moves {
		r := results[i]
		if r.keys == 0 {
			t.Errorf("%s: the move found no keys in slot %d", m.name, r.slot)
		}
		if o, err := cl.owner(ctx, r.slot); err != nil || o != r.to {
			t.Errorf("%s: slot %d owned by %v (%v), want %s", m.name, r.slot, o, err, r.to.addr())
		}
		for _, n := range cl.nodes {
			if got, err := n.rdb.ClusterCountKeysInSlot(ctx, int(r.slot)).Result(); err != nil {
				t.Errorf("countkeysinslot on %s: %v", n.addr(), err)
			} else if n != r.to && got != 0 {
				t.Errorf("%s: %d keys of slot %d left on %s", m.name, got, r.slot, n.addr())
			}
		}
		// The stock hash and the intake stream are on the new master.
		for _, key := range []string{m.keys.Stock(), m.keys.Intake()} {
			if n, err := r.to.rdb.Exists(ctx, key).Result(); err != nil || n != 1 {
				t.Errorf("%s: %s on %s: exists %d %v", m.name, key, r.to.addr(), n, err)
			}
		}
		// The sale went on: the product accepted orders after its move.
		if n := cs.acceptedAfter(m.pid, r.end); n == 0 {
			t.Errorf("%s: no order accepted after the move ended", m.name)
		} else {
			t.Logf("%s: %d orders accepted after the move", m.name, n)
		}
	}
	cs.check()
}

func indexOf(nodes []*clusterNode, n *clusterNode) int {
	for i, x := range nodes {
		if x == n {
			return i
		}
	}
	return -1
}

// clusterSaleSpec shapes a cluster sale. Every product is oversubscribed:
// buyers > stock.
type clusterSaleSpec struct {
	products, stock, buyers        int      // normal products: at least this many, covering every master
	hotShards, hotStock, hotBuyers int      // the hot product
	busyStock, busyBuyers          int      // optional: one more, bigger single-shard product
	gatewayArgs                    []string // extra flags of the gateway process
}

// clusterSale is a sale set up on a cluster env: the processes, the products
// and where their slots live.
type clusterSale struct {
	t      *testing.T
	e      *env
	cl     *redisCluster
	spec   clusterSaleSpec
	gws    []*proc
	pipe   *proc
	owners map[string]*clusterNode // hash tag → master
	slots  map[string]int64        // hash tag → slot

	normal []int64 // single-shard products
	hot    int64   // the sharded product
	busy   int64   // the big single-shard product, if any
	all    []int64 // every product created (extra hot candidates included)
	shards map[int64]int

	jobs     []*saleJob
	total    int
	answered atomic.Int64
}

// saleJob is one buyer's intent on one product and when it was answered.
type saleJob struct {
	pid     int64
	in      *intent
	replay  bool      // resend once right after the first answer
	at      time.Time // when the final answer came
	failure string    // a 5xx or transport error a buyer saw
}

// startClusterSale starts a gateway process and a pipeline process against
// the cluster, creates the products and checks their placement: the normal
// products' hash tags on all three masters, the hot product's shards on all
// three masters (products are created until that holds, or the test fails).
func startClusterSale(t *testing.T, e *env, cl *redisCluster, spec clusterSaleSpec) *clusterSale {
	t.Helper()
	cs := &clusterSale{t: t, e: e, cl: cl, spec: spec, owners: map[string]*clusterNode{}, slots: map[string]int64{},
		shards: map[int64]int{}}
	// Two gateways with leased node ids (buyers spread over them, replays
	// go to the first), so leases and cross-gateway idempotency run on the
	// cluster too.
	cs.gws = e.serveGateways(2, "gateway", "gateway,push", append(slices.Clone(spec.gatewayArgs), "--node-id", "-1")...)
	cs.pipe = e.serve("pipeline", "writer,relay,consumer,sweeper")

	masters := func(pids []int64) map[*clusterNode]int {
		m := map[*clusterNode]int{}
		for _, pid := range pids {
			for sh := range cs.shards[pid] {
				m[cs.owners[lua.ShardKeys(pid, sh).Tag()]]++
			}
		}
		return m
	}
	// Normal products: spec.products, then more (bounded) until every master has one.
	for len(cs.normal) < spec.products || len(masters(cs.normal)) < len(cl.nodes) {
		if len(cs.normal) >= spec.products+30 {
			t.Fatalf("%d products cover only %d masters", len(cs.normal), len(masters(cs.normal)))
		}
		cs.normal = append(cs.normal, cs.create(spec.stock, 1))
	}
	t.Logf("%d products over masters: %v", len(cs.normal), countByAddr(masters(cs.normal)))
	for try := 0; ; try++ {
		if try == 10 {
			t.Fatalf("no hot product with %d shards covering all masters in 10 tries", spec.hotShards)
		}
		pid := cs.create(spec.hotStock, spec.hotShards)
		if m := masters([]int64{pid}); len(m) == len(cl.nodes) {
			cs.hot = pid
			t.Logf("hot product %d: %d shards over masters %v", pid, spec.hotShards, countByAddr(m))
			break
		}
	}
	if spec.busyStock > 0 {
		cs.busy = cs.create(spec.busyStock, 1)
	}

	// The buyers: fresh users per product, shuffled; one in ten replays.
	user := int64(1_000_000)
	add := func(pid int64, n int) {
		for range n {
			user++
			cs.jobs = append(cs.jobs, &saleJob{pid: pid, in: e.newIntent(user), replay: rand.IntN(10) == 0})
		}
	}
	for _, pid := range cs.normal {
		add(pid, spec.buyers)
	}
	add(cs.hot, spec.hotBuyers)
	if cs.busy != 0 {
		add(cs.busy, spec.busyBuyers)
	}
	rand.Shuffle(len(cs.jobs), func(i, j int) { cs.jobs[i], cs.jobs[j] = cs.jobs[j], cs.jobs[i] })
	cs.total = len(cs.jobs)
	return cs
}

func countByAddr(m map[*clusterNode]int) map[string]int {
	out := map[string]int{}
	for n, c := range m {
		out[n.addr()] = c
	}
	return out
}

// create makes a product on sale now (limit 1 per user) and records where
// its shards' hash tags live (CLUSTER KEYSLOT, CLUSTER SHARDS).
func (cs *clusterSale) create(stock, shards int) int64 {
	cs.t.Helper()
	e := cs.e
	now := time.Now().UTC()
	a, err := e.call("POST", "/api/admin/products", e.admin, map[string]any{
		"name": cs.t.Name(), "price": 1000, "stock": stock, "perUserLimit": 1, "shards": shards,
		"saleStart": now.Add(-time.Second).Format(time.RFC3339), "saleEnd": now.Add(time.Hour).Format(time.RFC3339),
	})
	if err != nil || a.status != http.StatusCreated {
		cs.t.Fatalf("create product: %d %s %v", a.status, a.raw, err)
	}
	pid, _ := a.body["id"].(json.Number).Int64()
	cs.shards[pid] = shards
	cs.all = append(cs.all, pid)
	for sh := range shards {
		k := lua.ShardKeys(pid, sh)
		slot, err := cs.cl.keySlot(e.ctx, k.Stock())
		if err != nil {
			cs.t.Fatal(err)
		}
		owner, err := cs.cl.owner(e.ctx, slot)
		if err != nil {
			cs.t.Fatal(err)
		}
		cs.slots[k.Tag()], cs.owners[k.Tag()] = slot, owner
		// The stock hash really is on that master (no redirection).
		if n, err := owner.rdb.Exists(e.ctx, k.Stock()).Result(); err != nil || n != 1 {
			cs.t.Fatalf("product %d shard %d: stock hash not on %s (slot %d): %d %v", pid, sh, owner.addr(), slot, n, err)
		}
	}
	return pid
}

func (cs *clusterSale) slotOf(k lua.Keys) int64 { return cs.slots[k.Tag()] }

// saleRun shapes one run of the sale.
type saleRun struct {
	workers int
	pace    time.Duration // pause after each buyer of a worker
}

// run sends every buyer's intent from r.workers goroutines (a replay right
// after the first answer for the jobs marked so) while a monitor reads every
// shard's Redis available every 20ms. A 5xx or transport error is recorded as
// the job's failure and the intent is resent with the same requestId until
// answered, so the invariants can still be checked.
func (cs *clusterSale) run(r saleRun) {
	cs.t.Helper()
	e := cs.e
	stop := make(chan struct{})
	var monWG sync.WaitGroup
	var negative atomic.Value // string
	var samples atomic.Int64
	monWG.Go(func() {
		var keys []string
		for _, pid := range cs.all {
			for sh := range cs.shards[pid] {
				keys = append(keys, lua.ShardKeys(pid, sh).Stock())
			}
		}
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			cmds := make([]*redis.StringCmd, len(keys))
			e.rdb.Pipelined(e.ctx, func(p redis.Pipeliner) error {
				for i, k := range keys {
					cmds[i] = p.HGet(e.ctx, k, "available")
				}
				return nil
			})
			for i, c := range cmds {
				if v, err := c.Int64(); err == nil && v < 0 {
					negative.CompareAndSwap(nil, fmt.Sprintf("%s available %d", keys[i], v))
				}
			}
			samples.Add(1)
		}
	})

	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range r.workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(cs.jobs) || e.ctx.Err() != nil {
					return
				}
				j := cs.jobs[i]
				cs.send(j)
				if j.replay && j.failure == "" {
					first := j.in.orderNo
					cs.send(j)
					if first != "" && (j.in.orderNo != first || j.in.status != http.StatusOK) {
						cs.t.Errorf("replay of %d/%s answered %d %s, first %s", j.in.user, j.in.requestID, j.in.status, j.in.orderNo, first)
					}
				}
				cs.answered.Add(1)
				if r.pace > 0 {
					time.Sleep(r.pace)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(stop)
	monWG.Wait()
	if s, _ := negative.Load().(string); s != "" {
		cs.t.Errorf("Redis stock went negative: %s", s)
	}
	status := map[int]int{}
	failures := 0
	for _, j := range cs.jobs {
		status[j.in.status]++
		if j.failure != "" {
			failures++
			if failures <= 10 {
				cs.t.Errorf("buyer %d/%s of product %d saw an error: %s", j.in.user, j.in.requestID, j.pid, j.failure)
			}
		}
	}
	if failures > 0 {
		cs.t.Errorf("%d of %d buyers saw a 5xx or transport error", failures, len(cs.jobs))
	}
	cs.t.Logf("sale: %d intents in %s (%.0f/s), answers %v, %d stock samples", len(cs.jobs), took.Round(time.Millisecond),
		float64(len(cs.jobs))/took.Seconds(), status, samples.Load())
}

// send sends j's intent until it is answered (not 5xx, no transport error;
// 429 is retried too), recording the first failure.
func (cs *clusterSale) send(j *saleJob) {
	e := cs.e
	for try := 0; try < 50 && e.ctx.Err() == nil; try++ {
		a, err := e.buy(j.pid, j.in)
		switch {
		case err != nil:
			if j.failure == "" {
				j.failure = "transport: " + err.Error()
			}
		case a.status >= 500:
			if j.failure == "" {
				j.failure = fmt.Sprintf("%d %s", a.status, strings.TrimSpace(a.raw))
			}
		case a.status == http.StatusTooManyRequests:
		default:
			j.at = time.Now()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// acceptedAfter counts pid's intents answered 202 after t.
func (cs *clusterSale) acceptedAfter(pid int64, t time.Time) int {
	n := 0
	for _, j := range cs.jobs {
		if j.pid == pid && j.in.got202 && j.at.After(t) {
			n++
		}
	}
	return n
}

// check waits for an idle pipeline and asserts docs/spec.md §5 for every product,
// one order per answered intent, replays answering their orderNo, and no
// redirection error in the processes' logs.
func (cs *clusterSale) check() {
	cs.t.Helper()
	e := cs.e
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := pipeline.WaitIdle(ctx, e.rdb, e.store, cs.all, 100*time.Millisecond)
	if err != nil {
		cs.t.Fatalf("pipeline not idle after %s: %v (failed: %s)", time.Since(start).Round(time.Millisecond), err,
			strings.Join(rep.Failed(), "; "))
	}
	cs.t.Logf("pipeline idle %s after the sale", time.Since(start).Round(time.Millisecond))
	rep, err = pipeline.Reconcile(e.ctx, e.rdb, e.store, cs.all)
	if err != nil {
		cs.t.Fatalf("reconcile: %v", err)
	}
	if !rep.OK {
		cs.t.Errorf("docs/spec.md §5 reconcile failed: %s", strings.Join(rep.Failed(), "; "))
	}
	if len(rep.Products) != len(cs.all) {
		cs.t.Fatalf("reconcile covered %d products, want %d", len(rep.Products), len(cs.all))
	}
	byProduct := map[int64][]*intent{}
	for _, j := range cs.jobs {
		byProduct[j.pid] = append(byProduct[j.pid], j.in)
	}
	sold := 0
	for _, pa := range rep.Products {
		for _, s := range pa.RedisShards {
			if s < 0 {
				cs.t.Errorf("product %d: Redis shards %v", pa.ProductID, pa.RedisShards)
			}
		}
		ins := byProduct[pa.ProductID]
		e.checkIntents(pa.ProductID, ins, pipeline.Report{Products: []pipeline.ProductAudit{pa}})
		accepted := 0
		for _, in := range ins {
			if in.orderNo != "" {
				accepted++
			}
		}
		if len(ins) > 0 && pa.RedisAvailable != 0 {
			// Every product is oversubscribed: buyers were told sold out, so
			// nothing may be left (a sharded product checks every shard and
			// the transfers in flight before it says so, gateway/shards.go).
			cs.t.Errorf("product %d (%d shards) oversubscribed but %d units left in Redis: %v", pa.ProductID,
				cs.shards[pa.ProductID], pa.RedisAvailable, pa.RedisShards)
		}
		sold += accepted
	}
	cs.t.Logf("%d products reconciled, %d orders", len(rep.Products), sold)
	for _, j := range cs.jobs {
		e.replayAllQuiet(j.pid, j.in)
	}
	// Both gateways took orders, each under its own leased node id.
	nodes := map[int64]bool{}
	for _, j := range cs.jobs {
		if j.in.orderNo != "" {
			id, _, _, err := order.ParseNo(j.in.orderNo)
			if err != nil {
				cs.t.Fatal(err)
			}
			nodes[id>>12&1023] = true
		}
	}
	if len(nodes) != 2 {
		cs.t.Errorf("orderNos carry %d node ids (%v), want 2: one per gateway", len(nodes), nodes)
	}
	for _, p := range append(slices.Clone(cs.gws), cs.pipe) {
		for _, s := range []string{"MOVED", "ASK ", "TRYAGAIN", "CROSSSLOT", "CLUSTERDOWN"} {
			if ls := p.logLines(s); len(ls) > 0 {
				cs.t.Errorf("%s logged %d lines with %s, e.g. %s", p.name, len(ls), s, ls[0])
			}
		}
	}
}

// replayAllQuiet resends one answered intent and checks it answers 200 with
// its orderNo.
func (e *env) replayAllQuiet(pid int64, in *intent) {
	if in.orderNo == "" {
		return
	}
	a, err := e.call("POST", "/api/orders", in.token, map[string]any{"productId": pid, "quantity": 1, "requestId": in.requestID})
	if err != nil || a.status != http.StatusOK || a.body["orderNo"] != in.orderNo {
		e.t.Errorf("replay of %d/%s: %d %s %v, want 200 with %s", in.user, in.requestID, a.status, a.raw, err, in.orderNo)
	}
}
