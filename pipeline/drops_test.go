package pipeline_test

// Issue 28 end to end: real gateways (in process) and real pacers on the
// real Redis and MySQL: a pre-queue shuffled at the opening, through a pause
// and a sell-out; a draw whose unclaimed and unpaid wins pass on.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/drop"
	"github.com/stampede-sh/stampede/gateway"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

// dropProduct creates a product opening at start through g's admin API
// and sets its room with terms.
func (g *gw) dropProduct(stock int64, start time.Time, maxPer int64, terms map[string]any) int64 {
	g.t.Helper()
	a := g.do("POST", "/api/admin/products", gwAdmin, map[string]any{"name": fmt.Sprintf("drop-%d", time.Now().UnixNano()),
		"price": 700, "stock": stock, "saleStart": start.UTC().Format(time.RFC3339Nano), "saleEnd": start.Add(time.Hour).UTC().Format(time.RFC3339),
		"perUserLimit": 1, "maxPerOrder": maxPer, "waitingRoom": true})
	if a.status != 201 {
		g.t.Fatalf("create product: %d %s", a.status, a.raw)
	}
	pid := int64(a.body["id"].(float64))
	terms["on"] = true
	if a := g.do("POST", "/api/admin/products/"+strconv.FormatInt(pid, 10)+"/waiting-room", gwAdmin, terms); a.status != 200 {
		g.t.Fatalf("room terms: %d %s", a.status, a.raw)
	}
	return pid
}

// open moves a product's opening to a second from now (PATCH saleStart, as
// an operator may before the sale opened) and returns it.
func (g *gw) open(pid int64) time.Time {
	g.t.Helper()
	at := time.Now().Add(time.Second).UTC()
	if a := g.do("PATCH", "/api/admin/products/"+strconv.FormatInt(pid, 10), gwAdmin,
		map[string]any{"saleStart": at.Format(time.RFC3339Nano)}); a.status != 200 {
		g.t.Fatalf("move the opening: %d %s", a.status, a.raw)
	}
	return at
}

func (g *gw) queue(user, pid int64) answer {
	return g.do("POST", "/api/products/"+strconv.FormatInt(pid, 10)+"/queue", user, nil)
}

func (a answer) num(k string) int64 { f, _ := a.body[k].(float64); return int64(f) }

// published waits for the room's shuffle and returns the public record and
// the list, after checking them: the seed matches the commitment published
// before the pre-queue, the list matches its hash.
func (g *gw) published(pid int64, commitment string) (drop.Seed, []byte, answer) {
	g.t.Helper()
	path := "/api/products/" + strconv.FormatInt(pid, 10) + "/drop"
	deadline := time.Now().Add(20 * time.Second)
	var d answer
	for d = g.do("GET", path, 0, nil); d.str("state") != "OPEN"; d = g.do("GET", path, 0, nil) {
		if time.Now().After(deadline) {
			g.t.Fatalf("no shuffle published: %s", d.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d.str("commitment") != commitment {
		g.t.Fatalf("commitment changed at the shuffle: %s, published before %s", d.str("commitment"), commitment)
	}
	if err := drop.Verify(d.str("seed"), commitment); err != nil {
		g.t.Fatalf("published seed: %v", err)
	}
	seed, _ := drop.ParseSeed(d.str("seed"))
	req := g.do("GET", path+"/tickets", 0, nil)
	list := []byte(req.raw)
	if lh := drop.ListHash(list); fmt.Sprintf("%x", lh) != d.str("listHash") || req.status != 200 {
		g.t.Fatalf("list: %d, hash %x, published %s", req.status, lh, d.str("listHash"))
	}
	return seed, list, d
}

// Two gateways and two pacers through a pre-queue, the opening, a pause and
// a sell-out: every served position is the one the published seed and list
// give; nobody is admitted before a buyer with a better position, faster
// than the rate, while paused, or beyond the units left; the stock sells
// exactly once.
func TestDropPreQueueTwoGatewaysTwoPacers(t *testing.T) {
	e := newEnv(t)
	startPipeline(e, pipeline.ConsumerConfig{})
	g1 := startGateway(e)
	g2 := startGateway(e, func(c *gateway.Config) { c.NodeID = 10 })
	gws := []*gw{g1, g2}
	const stock, buyers, rate = 25, 60, 40.0
	pid := g1.dropProduct(stock, time.Now().Add(time.Hour), 1, map[string]any{"preQueueSeconds": 7200, "windowSeconds": 60})
	path := "/api/products/" + strconv.FormatInt(pid, 10)

	before := g2.do("GET", path+"/drop", 0, nil)
	commitment := before.str("commitment")
	if before.status != 200 || before.str("state") != "PRE_QUEUE" || len(commitment) != 64 || before.body["seed"] != nil {
		t.Fatalf("drop before the pre-queue's first ticket: %d %s", before.status, before.raw)
	}
	tickets := map[int64]string{}
	for u := int64(1); u <= buyers; u++ {
		a := gws[u%2].queue(u, pid)
		if a.status != 200 || a.str("state") != "PRE_QUEUE" || a.num("position") != 0 || !drop.ValidTicketID(a.str("ticket")) {
			t.Fatalf("pre-queue ticket of %d: %d %s", u, a.status, a.raw)
		}
		tickets[u] = a.str("ticket")
	}
	if a := g1.queue(7, pid); a.str("ticket") != tickets[7] {
		t.Fatalf("second take of user 7: %s, want ticket %s", a.raw, tickets[7])
	}
	if a := g2.do("POST", "/api/admin/products/"+strconv.FormatInt(pid, 10)+"/waiting-room", gwAdmin,
		map[string]any{"on": true, "mode": "random"}); a.status != 409 || a.code() != gateway.CodeRoomStarted {
		t.Fatalf("mode change with a pre-queue: %d %s", a.status, a.raw)
	}

	// Admissions as Redis shows them, sampled every 5 ms: the first deadline
	// seen of each user (deadline − window = when it was admitted), the
	// counters, and whether live admissions ever passed the units left.
	type sample struct {
		at        time.Time
		admitted  int64
		live, ava int64
	}
	var mu sync.Mutex
	firstDeadline := map[int64]float64{}
	var samples []sample
	orders := make(chan int64, buyers)
	ctx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ctx.Err() == nil {
			zs, _ := e.rdb.ZRangeWithScores(ctx, lua.Room(pid).Admitted(), 0, -1).Result()
			st, err := lua.ReadRoom(ctx, e.rdb, pid)
			now := time.Now()
			mu.Lock()
			for _, z := range zs {
				u, _ := strconv.ParseInt(z.Member.(string), 10, 64)
				if _, ok := firstDeadline[u]; !ok {
					firstDeadline[u] = z.Score
					orders <- u
				}
			}
			if err == nil {
				samples = append(samples, sample{now, st.Admitted, st.Live, st.Available})
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	var accepted sync.Map
	for w := range 4 {
		wg.Go(func() {
			for u := range orders {
				for { // a buyer admitted just before the pause tries again after it
					a := gws[w%2].buy(u, pid, "drop-"+strconv.FormatInt(u, 10))
					if a.status == 202 {
						accepted.Store(u, a.str("orderNo"))
					}
					if a.code() != gateway.CodeSalePaused {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	for i := range 2 {
		pc, err := pipeline.NewPacer(e.store, e.rdb, pipeline.PacerConfig{Rate: rate, Interval: 20 * time.Millisecond,
			ListEvery: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		run(t, "pacer "+strconv.Itoa(i), pc.Run)
	}
	// The opening with the sale paused: the shuffle is published, nobody is
	// admitted, so every served position is read while it cannot change.
	admin := "/api/admin/products/" + strconv.FormatInt(pid, 10)
	if a := g2.do("POST", admin+"/pause", gwAdmin, nil); a.status != 200 {
		t.Fatalf("pause: %d %s", a.status, a.raw)
	}
	g1.open(pid)
	seed, list, _ := g2.published(pid, commitment)
	position := map[int64]int64{}
	for u, tk := range tickets {
		want, err := drop.Position(seed, list, tk)
		a := gws[u%2].queue(u, pid)
		if err != nil || want == 0 || a.str("ticket") != tk || a.num("shufflePosition") != int64(want) || a.num("position") != int64(want) {
			t.Fatalf("user %d: served %s, recomputed position %d (%v)", u, a.raw, want, err)
		}
		position[u] = int64(want)
	}
	if a := g1.do("POST", admin+"/resume", gwAdmin, nil); a.status != 200 {
		t.Fatalf("resume: %d %s", a.status, a.raw)
	}

	// A pause once some are admitted: no admission until the resume.
	for {
		mu.Lock()
		n := len(firstDeadline)
		mu.Unlock()
		if n >= 8 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if a := g2.do("POST", admin+"/pause", gwAdmin, nil); a.status != 200 {
		t.Fatalf("pause: %d %s", a.status, a.raw)
	}
	pausedAt := time.Now()
	st0, _ := lua.ReadRoom(context.Background(), e.rdb, pid)
	time.Sleep(600 * time.Millisecond)
	resumeAt := time.Now()
	st1, _ := lua.ReadRoom(context.Background(), e.rdb, pid)
	if st1.Admitted != st0.Admitted {
		t.Errorf("admitted %d while paused (from %d to %d)", st1.Admitted-st0.Admitted, st0.Admitted, st1.Admitted)
	}
	if a := g1.do("POST", admin+"/resume", gwAdmin, nil); a.status != 200 {
		t.Fatalf("resume: %d %s", a.status, a.raw)
	}

	// The sell-out.
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := 0
		accepted.Range(func(any, any) bool { n++; return true })
		if n == stock {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d orders accepted after 30 s, want %d", n, stock)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // pacer steps after the sell-out
	stopWatch()
	<-watchDone
	close(orders)
	wg.Wait()

	// Admission follows the shuffle: sorted by position, admission times
	// never go back, and the admitted are exactly the best positions.
	var admittedUsers []int64
	for u := range firstDeadline {
		admittedUsers = append(admittedUsers, u)
	}
	slices.SortFunc(admittedUsers, func(a, b int64) int { return int(position[a] - position[b]) })
	for i, u := range admittedUsers {
		if position[u] != int64(i+1) {
			t.Fatalf("admitted users' positions %v…: position %d admitted while %d was not", admittedUsers, position[u], i+1)
		}
		if i > 0 && firstDeadline[u] < firstDeadline[admittedUsers[i-1]] {
			t.Fatalf("position %d admitted before position %d", position[u], position[admittedUsers[i-1]])
		}
	}
	// Never faster than the rate (over any two samples: the steps between
	// them credit at most the time since the step before the first, at most
	// one Interval per pacer earlier, plus the fraction carried), never while
	// paused, never beyond the units left. On a loaded machine a pacer's
	// step can come later than its Interval, and the step then credits the
	// whole gap (up to the script's MaxElapsed, 1 s): the slack is the longer
	// of two Intervals and the longest gap the sampler itself saw, which the
	// same starvation stretches.
	slack := 40 * time.Millisecond
	for i := 1; i < len(samples); i++ {
		slack = max(slack, samples[i].at.Sub(samples[i-1].at))
	}
	for i := range samples {
		if samples[i].live > samples[i].ava {
			t.Fatalf("sample %d: %d live admissions for %d units left", i, samples[i].live, samples[i].ava)
		}
		for j := i + 1; j < len(samples); j++ {
			dt := samples[j].at.Sub(samples[i].at)
			if samples[i].at.Before(resumeAt) && samples[j].at.After(pausedAt) {
				from, to := samples[i].at, samples[j].at
				if from.Before(pausedAt) {
					from = pausedAt
				}
				if to.After(resumeAt) {
					to = resumeAt
				}
				dt -= to.Sub(from)
			}
			if limit := rate*(max(dt, 0)+slack).Seconds() + 2; float64(samples[j].admitted-samples[i].admitted) > limit {
				t.Fatalf("%d admitted in %v: more than the rate allows (%.1f, slack %v)", samples[j].admitted-samples[i].admitted, dt, limit, slack)
			}
		}
	}
	// Everyone not admitted is told SOLD_OUT and keeps the place.
	for u := range tickets {
		if _, ok := firstDeadline[u]; !ok {
			if a := gws[u%2].queue(u, pid); a.str("state") != "SOLD_OUT" || a.num("position") < 1 {
				t.Fatalf("user %d after the sell-out: %s", u, a.raw)
			}
		}
	}
	e.waitIdle(pid)
	if n := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'WAITING_PAY'`, pid); n != stock {
		t.Fatalf("%d orders WAITING_PAY, want %d", n, stock)
	}
	t.Logf("%d admitted, %d samples, pause %v", len(firstDeadline), len(samples), resumeAt.Sub(pausedAt).Round(time.Millisecond))
}

// A draw: one entry per user; at the close as many winners as units and a
// reserve list; losers told at once; a win not used within its window, and
// a win whose order is not paid in time, pass to the next on the list; every
// unit is sold exactly once, through the pipeline.
func TestDropDrawPassesOnAndSellsOnce(t *testing.T) {
	e := newEnv(t)
	startPipeline(e, pipeline.ConsumerConfig{PayTimeout: 2 * time.Second})
	sw, err := pipeline.NewSweeper(e.store, pipeline.SweeperConfig{Interval: 100 * time.Millisecond, ReconcileInterval: -1, LostGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	run(t, "sweeper", sw.Run)
	g := startGateway(e)
	const units, reserve, entrants = 4, 4, 30
	pid := g.dropProduct(units, time.Now().Add(time.Hour), 1, map[string]any{"mode": "draw", "reserve": reserve, "windowSeconds": 2})
	commitment := g.do("GET", "/api/products/"+strconv.FormatInt(pid, 10)+"/drop", 0, nil).str("commitment")
	entries := map[int64]string{}
	for u := int64(1); u <= entrants; u++ {
		a := g.queue(u, pid)
		if a.status != 200 || a.str("state") != "PRE_QUEUE" || a.str("mode") != "draw" {
			t.Fatalf("entry of %d: %d %s", u, a.status, a.raw)
		}
		entries[u] = a.str("ticket")
		if b := g.queue(u, pid); b.str("ticket") != entries[u] {
			t.Fatalf("second entry of %d: %s", u, b.raw)
		}
	}
	pc, err := pipeline.NewPacer(e.store, e.rdb, pipeline.PacerConfig{Interval: 20 * time.Millisecond, ListEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run(t, "pacer", pc.Run)
	g.open(pid)
	seed, list, d := g.published(pid, commitment)
	if d.num("winners") != units || d.num("preQueued") != entrants {
		t.Fatalf("draw record: %s", d.raw)
	}
	if a := g.queue(entrants+1, pid); a.status != 409 || a.code() != gateway.CodeDrawClosed {
		t.Fatalf("entry after the close: %d %s", a.status, a.raw)
	}
	byRank := map[int]int64{}
	for u, tk := range entries {
		r, _ := drop.Position(seed, list, tk)
		byRank[r] = u
	}
	// Losers are told at once; the reserve list waits in order.
	waitState := func(u int64, want string) answer {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			a := g.queue(u, pid)
			if a.str("state") == want {
				return a
			}
			if time.Now().After(deadline) {
				t.Fatalf("user %d: %s, want %s", u, a.raw, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for r := units + reserve + 1; r <= entrants; r++ {
		if a := g.queue(byRank[r], pid); a.str("state") != "LOST" {
			t.Fatalf("rank %d: %s, want LOST", r, a.raw)
		}
	}
	for r := 1; r <= units; r++ {
		waitState(byRank[r], "ADMITTED")
	}
	if a := g.queue(byRank[units+1], pid); a.str("state") != "WAITING" || a.num("position") != 1 {
		t.Fatalf("first on the reserve list: %s", a.raw)
	}
	// Rank 1 buys and pays; rank 2 buys and never pays; rank 3 lets the
	// window pass; rank 4 buys and pays.
	// A win's window (2 s) lasts until the winner orders: ranks 1, 2 and 4
	// order one after the other before anyone pays (paying waits for the
	// pipeline, which on a loaded machine outlasted rank 4's window).
	paid := map[int64]bool{}
	buy := func(u int64) string {
		t.Helper()
		a := g.buy(u, pid, "draw-"+strconv.FormatInt(u, 10))
		if a.status != 202 {
			t.Fatalf("order of winner %d: %d %s", u, a.status, a.raw)
		}
		if g.buy(u, pid, "draw-again-"+strconv.FormatInt(u, 10)).status != 409 {
			t.Fatalf("winner %d ordered twice on one win", u)
		}
		return a.str("orderNo")
	}
	pay := func(u int64, no string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if o, err := e.store.GetOrder(context.Background(), no); err == nil && o.Status == order.WaitingPay {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("order %s not WAITING_PAY", no)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if p := g.do("POST", "/api/orders/"+no+"/pay", u, nil); p.status != 200 {
			t.Fatalf("pay %s: %d %s", no, p.status, p.raw)
		}
		paid[u] = true
	}
	no1 := buy(byRank[1])
	buy(byRank[2])
	no4 := buy(byRank[4])
	pay(byRank[1], no1)
	pay(byRank[4], no4)
	// The unclaimed win (rank 3) and the unpaid one (rank 2, its order
	// cancelled at the pay timeout and its unit released) pass to ranks 5
	// and 6; they buy and pay.
	waitState(byRank[3], "EXPIRED")
	for _, r := range []int{5, 6} {
		waitState(byRank[r], "ADMITTED")
		pay(byRank[r], buy(byRank[r]))
	}
	if a := g.queue(byRank[2], pid); a.str("state") != "ORDERED" {
		t.Fatalf("the winner whose order was not paid: %s", a.raw)
	}
	e.waitIdle(pid)
	if n := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'PAID'`, pid); n != units {
		t.Fatalf("%d orders PAID, want every unit once (%d)", n, units)
	}
	if n := e.count(`SELECT COUNT(DISTINCT user_id) FROM order_info WHERE product_id = ? AND status = 'PAID'`, pid); n != units {
		t.Fatalf("%d buyers paid, want %d", n, units)
	}
	if n := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'CANCELLED'`, pid); n != 1 {
		t.Fatalf("%d orders CANCELLED, want the unpaid one", n)
	}
	for u := range paid {
		if r, _ := drop.Position(seed, list, entries[u]); r > units+reserve {
			t.Fatalf("user %d (rank %d) bought", u, r)
		}
	}
	if n, _ := e.rdb.HLen(context.Background(), lua.Room(pid).Pre()).Result(); n != entrants {
		t.Fatalf("%d entries in Redis, want one per user (%d)", n, entrants)
	}
	if s := e.stock(pid); s.Available != 0 || s.Sold != units {
		t.Fatalf("stock %+v: want every unit sold", s)
	}
}

// A draw's winners are admitted at once in auto mode: the pacer's window
// (here 6 orders, grown only by measurements ten seconds apart) paces a
// fifo line but not a draw, whose units are all offered at the close.
// Before, 5,000 winners took 13 s to be admitted (bench "draw"); here the
// window alone would take about 50 s for 2,500.
func TestDropDrawAdmitsItsWinnersAtOnce(t *testing.T) {
	e := newEnv(t)
	g := startGateway(e)
	const units = 2500 // more than one step's most (2,000)
	pid := g.dropProduct(units, time.Now().Add(time.Hour), 1, map[string]any{"mode": "draw", "reserve": 0, "windowSeconds": 60})
	ctx := context.Background()
	for first := int64(1); first <= units; first += 250 {
		calls := make([]lua.TakeCall, 250)
		for i := range calls {
			u := first + int64(i)
			calls[i] = lua.TakeCall{ProductID: pid, Args: lua.TakeArgs{UserID: u, TicketID: fmt.Sprintf("%016x", u)}}
		}
		lua.TakeMany(ctx, e.rdb, calls)
		for _, c := range calls {
			if c.Err != nil || c.Place.State != lua.PlacePreQueue {
				t.Fatalf("entry of %d: %+v %v", c.Args.UserID, c.Place, c.Err)
			}
		}
	}
	pc, err := pipeline.NewPacer(e.store, e.rdb, pipeline.PacerConfig{Interval: 20 * time.Millisecond, ListEvery: 100 * time.Millisecond,
		StartRate: 20, TargetBacklog: 300 * time.Millisecond, MeasureEvery: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	run(t, "pacer", pc.Run)
	g.open(pid)
	var shuffled time.Time
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := lua.ReadRoom(ctx, e.rdb, pid)
		if err != nil {
			t.Fatal(err)
		}
		if st.Shuffled && shuffled.IsZero() {
			shuffled = time.Now()
		}
		if st.Shuffled && st.Winners == units && st.Admitted >= units {
			t.Logf("%d winners admitted %v after the shuffle was seen", st.Admitted, time.Since(shuffled).Round(time.Millisecond))
			if d := time.Since(shuffled); d > 3*time.Second {
				t.Fatalf("%d winners admitted %v after the shuffle; want them at once", units, d)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("room %+v 30 s after the opening", st)
		}
	}
}
