package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/drop"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
)

// roomSale is openSale with the waiting room on.
func roomSale(stock int64) map[string]any {
	p := openSale(stock)
	return map[string]any{"name": p.Name, "price": p.Price, "stock": p.Stock, "saleStart": p.SaleStart,
		"saleEnd": p.SaleEnd, "perUserLimit": 0, "waitingRoom": true}
}

func (e *env) roomProduct(stock int64) int64 {
	e.t.Helper()
	return e.roomProductWith(roomSale(stock))
}

func (e *env) roomProductWith(spec map[string]any) int64 {
	e.t.Helper()
	r := e.do("POST", "/api/admin/products", token(e.t, adminID), spec)
	if r.status != 201 || r.json(e.t)["waitingRoom"] != true {
		e.t.Fatalf("create room product: %s", r)
	}
	id, _ := r.json(e.t)["id"].(json.Number).Int64()
	return id
}

func (e *env) queue(user, pid int64) resp {
	e.t.Helper()
	return e.do("POST", "/api/products/"+strconv.FormatInt(pid, 10)+"/queue", token(e.t, user), nil)
}

// place takes user's place and requires a 200.
func (e *env) place(user, pid int64) (ticket string, position int64, state string) {
	e.t.Helper()
	r := e.queue(user, pid)
	if r.status != 200 {
		e.t.Fatalf("queue of user %d: %s", user, r)
	}
	m := r.json(e.t)
	position, _ = m["position"].(json.Number).Int64()
	return m["ticket"].(string), position, m["state"].(string)
}

// openRoom does what a pacer does at the opening: the step that closes the
// pre-queue and the shuffle, with the seed the gateway stored.
func (e *env) openRoom(pid int64) {
	e.t.Helper()
	ctx := context.Background()
	if st, _ := lua.ReadRoom(ctx, e.rdb, pid); st.Shuffled {
		return
	}
	t, err := e.store.Room(ctx, pid)
	if err != nil {
		e.t.Fatal(err)
	}
	seed, err := drop.ParseSeed(t.Seed)
	if err != nil {
		e.t.Fatal(err)
	}
	shards, _ := e.srv.intake.ShardCount(pid)
	left := int64(-1)
	if shards > 1 {
		left, _ = lua.UnitsLeft(ctx, e.rdb, pid, shards)
	}
	if _, err := lua.Admit(ctx, e.rdb, pid, lua.AdmitArgs{Max: 1, MaxElapsed: time.Second, Window: time.Minute, Left: left}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := lua.ShuffleRoom(ctx, e.rdb, pid, lua.RoomMode(t.Mode), seed, left); err != nil {
		e.t.Fatal(err)
	}
}

// admit opens the room if needed and runs pacer steps at rate until n
// buyers were admitted.
func (e *env) admit(pid int64, n int) []lua.Admission {
	e.t.Helper()
	e.openRoom(pid)
	shards, _ := e.srv.intake.ShardCount(pid)
	var out []lua.Admission
	deadline := time.Now().Add(5 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		left := int64(-1)
		if shards > 1 {
			left, _ = lua.UnitsLeft(context.Background(), e.rdb, pid, shards)
		}
		res, err := lua.Admit(context.Background(), e.rdb, pid, lua.AdmitArgs{Rate: 1000, Max: n - len(out), MaxElapsed: time.Second,
			Window: time.Minute, Left: left})
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, res.Admitted...)
		time.Sleep(5 * time.Millisecond)
	}
	if len(out) != n {
		e.t.Fatalf("admitted %d, want %d", len(out), n)
	}
	return out
}

// An order needs an admitted ticket (409 NOT_ADMITTED, nothing reserved);
// tickets are idempotent per user and survive a gateway restart; a gateway
// that has not seen the room yet still checks the admission.
func TestWaitingRoomAdmission(t *testing.T) {
	e := newEnv(t)
	pid := e.roomProduct(10)

	r := e.buy(1, pid, 1, "a")
	r.wantError(t, 409, CodeNotAdmitted)
	if e.available(pid, 0) != 10 || e.intake(pid) != 0 {
		t.Fatalf("a refused order reserved: available %d, intake %d", e.available(pid, 0), e.intake(pid))
	}
	tickets := map[int64]string{}
	for u := int64(1); u <= 3; u++ {
		tk, pos, st := e.place(u, pid)
		if !drop.ValidTicketID(tk) || pos != u || st != "WAITING" {
			t.Fatalf("user %d: ticket %s position %d %s", u, tk, pos, st)
		}
		tickets[u] = tk
	}
	if r := e.queue(2, pid); r.json(t)["ticket"] != tickets[2] || r.json(t)["etaSeconds"] != nil || r.json(t)["mode"] != "fifo" {
		t.Fatalf("asking again: %s (want the same ticket, no estimate before the pacer ran)", r)
	}
	e.buy(1, pid, 1, "a").wantError(t, 409, CodeNotAdmitted)

	if a := e.admit(pid, 1); a[0].UserID != 1 || a[0].Ticket != tickets[1] {
		t.Fatalf("admitted %+v, want user 1", a)
	}
	if _, pos, st := e.place(1, pid); st != "ADMITTED" || pos != 0 {
		t.Fatalf("user 1 after admission: %s position %d", st, pos)
	}
	if _, pos, _ := e.place(3, pid); pos != 2 {
		t.Fatalf("user 3 position %d after one admission, want 2", pos)
	}
	e.accepted(1, pid, 1, "a")
	if r := e.buy(1, pid, 1, "a"); r.status != 200 {
		t.Fatalf("replay of the admitted order: %s", r)
	}
	e.buy(1, pid, 1, "b").wantError(t, 409, CodeNotAdmitted) // the admission was used

	// A restarted gateway (a new Server, no hints) keeps the line: the same
	// tickets, and an admitted buyer orders through it.
	e2 := &env{t: t, rdb: e.rdb, store: e.store}
	srv, err := New(baseConfig(), e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	e2.srv = srv
	e2.hc, e2.ln = serveInMemory(t, srv)
	e2.buy(3, pid, 1, "c").wantError(t, 409, CodeNotAdmitted)
	e.admit(pid, 1)
	e3 := &env{t: t, rdb: e.rdb, store: e.store}
	srv3, _ := New(baseConfig(), e.rdb, e.store, testLogger(t))
	e3.srv = srv3
	e3.hc, e3.ln = serveInMemory(t, srv3)
	e3.accepted(2, pid, 1, "c") // no hint: ROOM_ON, then the admission check
	if tk, pos, st := e2.place(3, pid); tk != tickets[3] || pos != 1 || st != "WAITING" {
		t.Fatalf("user 3 through the restarted gateway: ticket %s position %d %s", tk, pos, st)
	}
}

// Bad input is 400 and a product without a room answers WAITING_ROOM_OFF;
// the admin endpoint turns the room off and on and keeps what it is not
// given.
func TestWaitingRoomInputsAndToggle(t *testing.T) {
	e := newEnv(t)
	bad := roomSale(5)
	bad["waitingRoom"] = "yes"
	e.do("POST", "/api/admin/products", token(t, adminID), malformed(bad)).wantError(t, 400, CodeInvalidArgument)

	plain := e.product(openSale(5))
	e.queue(1, plain).wantError(t, 409, CodeWaitingRoomOff)
	e.queue(1, 999999).wantError(t, 404, CodeProductNotFound)
	e.do("POST", "/api/products/x/queue", token(t, 1), malformed(nil)).wantError(t, 404, CodeProductNotFound)
	e.do("GET", fmt.Sprintf("/api/products/%d/drop", plain), "", nil).wantError(t, 409, CodeWaitingRoomOff)

	path := fmt.Sprintf("/api/admin/products/%d/waiting-room", plain)
	admin := token(t, adminID)
	e.do("POST", path, token(t, 1), map[string]any{"on": true}).wantError(t, 403, CodeForbidden)
	e.do("GET", path, token(t, 1), nil).wantError(t, 403, CodeForbidden)
	e.do("GET", path, admin, nil).wantError(t, 409, CodeWaitingRoomOff)
	for _, b := range []map[string]any{{"on": 1}, {"on": true, "windowSeconds": 0}, {"on": true, "ceiling": -1},
		{"on": true, "mode": "lottery"}, {"on": true, "preQueueSeconds": -1}, {"on": true, "reserve": -1},
		{"on": true, "powCost": 10_000_001}, {"on": true, "mode": "draw"}} { // a draw needs maxPerOrder 1
		e.do("POST", path, admin, malformed(b)).wantError(t, 400, CodeInvalidArgument)
	}
	r := e.do("POST", path, admin, map[string]any{"on": true, "ceiling": 50, "windowSeconds": 30})
	commitment, _ := r.json(t)["commitment"].(string)
	if r.status != 200 || len(commitment) != 64 || r.json(t)["mode"] != "fifo" {
		t.Fatalf("turn on: %s", r)
	}
	if r := e.do("GET", fmt.Sprintf("/api/products/%d", plain), "", nil); r.json(t)["waitingRoom"] != true {
		t.Fatalf("product after turning the room on: %s", r)
	}
	e.buy(1, plain, 1, "x").wantError(t, 409, CodeNotAdmitted)
	r = e.do("POST", path, admin, map[string]any{"on": false})
	if r.status != 200 || r.json(t)["commitment"] != commitment || r.json(t)["ceiling"].(json.Number).String() != "50" {
		t.Fatalf("turn off (the seed and the other terms are kept): %s", r)
	}
	e.accepted(1, plain, 1, "x")
	if r := e.do("GET", fmt.Sprintf("/api/products/%d/drop", plain), "", nil); r.status != 200 || r.json(t)["state"] != "OFF" {
		t.Fatalf("public record of a room turned off: %s", r)
	}
}

// A buyer who holds the per-user limit gets no new ticket (409
// PURCHASE_LIMIT_EXCEEDED): an admission could only be wasted, holding a
// place others could use. Below the limit (a buyer holding nothing, or
// once the units were given back) a ticket is given.
func TestWaitingRoomTicketRespectsTheLimit(t *testing.T) {
	e := newEnv(t)
	spec := roomSale(10)
	spec["perUserLimit"], spec["maxPerOrder"] = 1, 1
	pid := e.roomProductWith(spec)
	e.place(1, pid)
	e.place(2, pid)
	e.openRoom(pid)
	e.admit(pid, 1)
	e.accepted(1, pid, 1, "a") // the admission is used: user 1's ticket is finished
	e.queue(1, pid).wantError(t, 409, CodePurchaseLimitExceeded)
	if _, _, st := e.place(2, pid); st != "WAITING" {
		t.Fatalf("user 2, holding nothing: %s", st)
	}
	if n, _ := e.rdb.HLen(context.Background(), lua.Room(pid).Tickets()).Result(); n != 2 {
		t.Fatalf("%d ticket records, want 2 (none for the refused request)", n)
	}
	// The units given back (release.lua does this for a cancelled order).
	if err := e.rdb.DecrBy(context.Background(), lua.ShardKeys(pid, 0).User(1), 1).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, st := e.place(1, pid); st != "WAITING" {
		t.Fatalf("user 1 after the units came back: %s", st)
	}

	// A sharded product counts a buyer's units on the home shard, which the
	// room's script cannot read: no check (the order is refused there).
	spec["shards"] = 2
	sharded := e.roomProductWith(spec)
	if err := e.rdb.Set(context.Background(), lua.ShardKeys(sharded, 0).User(1), 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, st := e.place(1, sharded); st != "WAITING" {
		t.Fatalf("user 1 on a sharded product: %s, want a ticket (no check)", st)
	}
}

// A draw sells one unit per winner: while a product's room is on as a
// draw, a PATCH of maxPerOrder to anything but 1 is 400 and changes
// nothing (a winner could otherwise order every unit); with the room off
// it may change, and turning the draw back on is then refused.
func TestDrawKeepsMaxPerOrderOne(t *testing.T) {
	e := newEnv(t)
	p := openSale(3)
	now := time.Now().UTC()
	p.SaleStart, p.SaleEnd = now.Add(time.Hour).Format(time.RFC3339), now.Add(2*time.Hour).Format(time.RFC3339)
	p.MaxPerOrder = 1
	pid := e.product(p)
	admin := token(t, adminID)
	room := fmt.Sprintf("/api/admin/products/%d/waiting-room", pid)
	patch := fmt.Sprintf("/api/admin/products/%d", pid)
	if r := e.do("POST", room, admin, map[string]any{"on": true, "mode": "draw"}); r.status != 200 {
		t.Fatalf("draw on: %s", r)
	}
	e.do("PATCH", patch, admin, map[string]any{"maxPerOrder": 3, "perUserLimit": 3}).wantError(t, 400, CodeInvalidArgument)
	if r := e.do("GET", "/api/products/"+strconv.FormatInt(pid, 10), "", nil); r.json(t)["maxPerOrder"].(json.Number).String() != "1" {
		t.Fatalf("product after the refused PATCH: %s", r)
	}
	if r := e.do("PATCH", patch, admin, map[string]any{"maxPerOrder": 1, "name": "Draw widget"}); r.status != 200 {
		t.Fatalf("PATCH keeping maxPerOrder 1: %s", r)
	}
	if r := e.do("POST", room, admin, map[string]any{"on": false}); r.status != 200 {
		t.Fatalf("room off: %s", r)
	}
	if r := e.do("PATCH", patch, admin, map[string]any{"maxPerOrder": 3}); r.status != 200 {
		t.Fatalf("PATCH with the room off: %s", r)
	}
	e.do("POST", room, admin, map[string]any{"on": true, "mode": "draw"}).wantError(t, 400, CodeInvalidArgument)

	// Once the sale opened, maxPerOrder no longer changes at all: 409
	// SALE_STARTED, the same answer as without a draw (it was 400 here).
	q := openSale(3)
	q.MaxPerOrder = 1
	opened := e.product(q)
	if r := e.do("POST", fmt.Sprintf("/api/admin/products/%d/waiting-room", opened), admin, map[string]any{"on": true, "mode": "draw"}); r.status != 200 {
		t.Fatalf("draw on an opened sale: %s", r)
	}
	e.do("PATCH", fmt.Sprintf("/api/admin/products/%d", opened), admin, map[string]any{"maxPerOrder": 3}).wantError(t, 409, CodeSaleStarted)
}

// A draw's maxPerOrder is checked by the store under the product row's
// lock, not against a gateway's product cache: a PATCH through one gateway
// and a draw turned on through another whose cache still holds the old row
// cannot both pass (before, the second gateway's cache said maxPerOrder 1
// and the draw went on with 3), and of the two sent at once exactly one
// wins.
func TestDrawPerOrderCheckedUnderTheRowLock(t *testing.T) {
	e := newEnv(t)
	cfg := baseConfig()
	cfg.ProductCacheTTL = time.Hour // e2's product rows stay as first read
	srv, err := New(cfg, e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	e2 := &env{t: t, rdb: e.rdb, store: e.store, srv: srv}
	e2.hc, e2.ln = serveInMemory(t, srv)
	admin := token(t, adminID)
	upcoming := func() int64 {
		p := openSale(3)
		now := time.Now().UTC()
		p.SaleStart, p.SaleEnd = now.Add(time.Hour).Format(time.RFC3339), now.Add(2*time.Hour).Format(time.RFC3339)
		p.MaxPerOrder = 1
		return e.product(p)
	}
	room := func(pid int64) string { return fmt.Sprintf("/api/admin/products/%d/waiting-room", pid) }
	patch := func(pid int64) string { return fmt.Sprintf("/api/admin/products/%d", pid) }

	pid := upcoming()
	if r := e2.do("GET", "/api/products/"+strconv.FormatInt(pid, 10), "", nil); r.status != 200 {
		t.Fatalf("product through e2: %s", r)
	}
	if r := e.do("PATCH", patch(pid), admin, map[string]any{"maxPerOrder": 3}); r.status != 200 {
		t.Fatalf("PATCH maxPerOrder 3: %s", r)
	}
	e2.do("POST", room(pid), admin, map[string]any{"on": true, "mode": "draw"}).wantError(t, 400, CodeInvalidArgument)

	for i := range 20 {
		pid := upcoming()
		var wg sync.WaitGroup
		var patched, drawn int
		wg.Go(func() { patched = e.do("PATCH", patch(pid), admin, map[string]any{"maxPerOrder": 3}).status })
		wg.Go(func() { drawn = e2.do("POST", room(pid), admin, map[string]any{"on": true, "mode": "draw"}).status })
		wg.Wait()
		if (patched == 200) == (drawn == 200) {
			t.Fatalf("round %d: PATCH maxPerOrder 3 answered %d and the draw %d: exactly one must win", i, patched, drawn)
		}
	}
}

// Two gateways take tickets and two pacers admit at once: every accepted
// order belongs to an admitted buyer, admissions follow ticket order and
// never exceed rate × time.
func TestWaitingRoomTwoGatewaysTwoPacers(t *testing.T) {
	e := newEnv(t)
	pid := e.roomProduct(1000)
	e2 := &env{t: t, rdb: e.rdb, store: e.store}
	srv, _ := New(baseConfig(), e.rdb, e.store, testLogger(t))
	e2.srv = srv
	e2.hc, e2.ln = serveInMemory(t, srv)
	gws := []*env{e, e2}
	const users = 120
	var wg sync.WaitGroup
	for u := int64(1); u <= users; u++ {
		wg.Go(func() { gws[u%2].place(u, pid) })
	}
	wg.Wait()
	e.openRoom(pid)

	const rate = 100.0
	start := time.Now()
	var mu sync.Mutex
	admitted := map[int64]int64{} // user → place
	for range 2 {
		wg.Go(func() {
			for time.Since(start) < 400*time.Millisecond {
				res, err := lua.Admit(context.Background(), e.rdb, pid, lua.AdmitArgs{Rate: rate, Max: 100, MaxElapsed: time.Second, Window: time.Minute, Left: -1})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, a := range res.Admitted {
					admitted[a.UserID] = a.Place
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	// Every buyer tries to order while the pacers run, on either gateway.
	accepted := make([]bool, users+1)
	for u := int64(1); u <= users; u++ {
		wg.Go(func() {
			for time.Since(start) < 600*time.Millisecond {
				if r := gws[(u+1)%2].buy(u, pid, 1, "r"); r.status == 202 || r.status == 200 {
					accepted[u] = true
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if limit := int(rate*elapsed.Seconds()) + 1; len(admitted) > limit || len(admitted) == 0 {
		t.Fatalf("admitted %d in %v at %v/s (limit %d)", len(admitted), elapsed, rate, limit)
	}
	var maxPlace int64
	for _, p := range admitted {
		maxPlace = max(maxPlace, p)
	}
	if maxPlace != int64(len(admitted)) {
		t.Fatalf("admitted %d buyers up to place %d: not in ticket order", len(admitted), maxPlace)
	}
	n := 0
	for u := int64(1); u <= users; u++ {
		if accepted[u] {
			n++
			if _, ok := admitted[u]; !ok {
				t.Errorf("user %d ordered without an admission", u)
			}
		}
	}
	if got := 1000 - e.available(pid, 0); got != int64(n) || n > len(admitted) {
		t.Fatalf("%d units taken, %d orders accepted, %d admitted", got, n, len(admitted))
	}
}

// Tickets through the take pipeline (Config.RoomPipeline: concurrent
// requests share one room_take.lua run): 150 buyers, each asking three
// times at once, get one ticket each, the same in all three answers, and
// the places 1…150 once each.
func TestWaitingRoomPipelinedTickets(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.RoomPipeline = 64 })
	pid := e.roomProduct(1000)
	const users = 150
	var mu sync.Mutex
	tickets := map[int64]map[string]bool{}
	positions := map[int64]int64{}
	var wg sync.WaitGroup
	for u := int64(1); u <= users; u++ {
		for range 3 {
			wg.Go(func() {
				r := e.queue(u, pid)
				if r.status != 200 {
					t.Errorf("queue of user %d: %s", u, r)
					return
				}
				m := r.json(t)
				pos, _ := m["position"].(json.Number).Int64()
				mu.Lock()
				defer mu.Unlock()
				if tickets[u] == nil {
					tickets[u] = map[string]bool{}
				}
				tickets[u][m["ticket"].(string)] = true
				positions[u] = max(positions[u], pos)
			})
		}
	}
	wg.Wait()
	seen := map[int64]int64{}
	for u := int64(1); u <= users; u++ {
		if len(tickets[u]) != 1 {
			t.Fatalf("user %d was given %d tickets: %v", u, len(tickets[u]), tickets[u])
		}
		if p := positions[u]; p < 1 || p > users || seen[p] != 0 {
			t.Fatalf("user %d at position %d (also user %d's)", u, p, seen[p])
		}
		seen[positions[u]] = u
	}
	if n, _ := e.rdb.HLen(context.Background(), lua.Room(pid).Tickets()).Result(); n != users {
		t.Fatalf("%d tickets in Redis, want %d", n, users)
	}
}

// The public record of a pre-queue: the commitment before any ticket, no
// seed and no list before the opening, then the seed, the list and its
// hash, from which every served position is recomputed; the admin view
// shows the same and the counters.
func TestDropPublicRecord(t *testing.T) {
	e := newEnv(t)
	spec := roomSale(10)
	spec["saleStart"] = time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	spec["saleEnd"] = time.Now().Add(3 * time.Hour).UTC().Format(time.RFC3339)
	pid := e.roomProductWith(spec)
	base := fmt.Sprintf("/api/products/%d/drop", pid)
	d := e.do("GET", base, "", nil)
	commitment, _ := d.json(t)["commitment"].(string)
	if d.status != 200 || d.json(t)["state"] != "PRE_QUEUE" || d.json(t)["seed"] != nil || len(commitment) != 64 || d.json(t)["rule"] != drop.Rule {
		t.Fatalf("drop before the opening: %s", d)
	}
	e.do("GET", base+"/tickets", "", nil).wantError(t, 409, CodeShuffleNotPublished)
	tickets := map[int64]string{}
	for u := int64(1); u <= 25; u++ {
		tk, pos, st := e.place(u, pid)
		if st != "PRE_QUEUE" || pos != 0 {
			t.Fatalf("pre-queue ticket of %d: %s %d", u, st, pos)
		}
		tickets[u] = tk
	}
	if r := e.queue(3, pid); r.json(t)["opensAt"] == nil || r.json(t)["etaSeconds"] != nil {
		t.Fatalf("pre-queue answer: %s", r)
	}
	// The opening.
	if err := e.rdb.HSet(context.Background(), lua.Room(pid).Stock(), "start", time.Now().Add(-time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, st := e.place(3, pid); st != "SHUFFLING" {
		t.Fatalf("after the opening, before the shuffle: %s", st)
	}
	e.openRoom(pid)
	d = e.do("GET", base, "", nil)
	m := d.json(t)
	seedHex, _ := m["seed"].(string)
	if m["state"] != "OPEN" || m["commitment"] != commitment || drop.Verify(seedHex, commitment) != nil || m["preQueued"].(json.Number).String() != "25" {
		t.Fatalf("drop after the shuffle: %s", d)
	}
	l := e.do("GET", base+"/tickets", "", nil)
	if l.status != 200 || l.header.Get("Content-Type") != "text/plain; charset=utf-8" || fmt.Sprintf("%x", drop.ListHash(l.body)) != m["listHash"] {
		t.Fatalf("list: %d %s %q", l.status, l.header.Get("Content-Type"), l.body)
	}
	seed, _ := drop.ParseSeed(seedHex)
	for u, tk := range tickets {
		want, err := drop.Position(seed, l.body, tk)
		r := e.queue(u, pid).json(t)
		if err != nil || r["shufflePosition"].(json.Number).String() != strconv.Itoa(want) || r["position"].(json.Number).String() != strconv.Itoa(want) {
			t.Fatalf("user %d: served %v, recomputed %d (%v)", u, r, want, err)
		}
	}
	// A ticket taken after the opening queues behind, without a shuffle position.
	if r := e.queue(26, pid).json(t); r["position"].(json.Number).String() != "26" || r["shufflePosition"].(json.Number).String() != "0" {
		t.Fatalf("late ticket: %v", r)
	}
	a := e.do("GET", fmt.Sprintf("/api/admin/products/%d/waiting-room", pid), token(t, adminID), nil)
	am := a.json(t)
	dm, _ := am["drop"].(map[string]any)
	if a.status != 200 || dm["seed"] != seedHex || am["issued"].(json.Number).String() != "26" || am["waiting"].(json.Number).String() != "26" {
		t.Fatalf("admin view: %s", a)
	}
}

// A sharded product can have a room: its order claims the admission on
// shard 0, reserves on the home shard, and a replay answers 200.
func TestWaitingRoomSharded(t *testing.T) {
	e := newEnv(t)
	spec := roomSale(40)
	spec["shards"] = 4
	spec["perUserLimit"] = 1
	pid := e.roomProductWith(spec)
	for u := int64(1); u <= 6; u++ {
		e.place(u, pid)
	}
	e.buy(1, pid, 1, "a").wantError(t, 409, CodeNotAdmitted)
	for _, a := range e.admit(pid, 3) {
		e.accepted(a.UserID, pid, 1, "r"+strconv.FormatInt(a.UserID, 10))
		if r := e.buy(a.UserID, pid, 1, "r"+strconv.FormatInt(a.UserID, 10)); r.status != 200 {
			t.Fatalf("replay: %s", r)
		}
		e.buy(a.UserID, pid, 1, "again").wantError(t, 409, CodeNotAdmitted)
	}
	e.buy(5, pid, 1, "x").wantError(t, 409, CodeNotAdmitted)
	// A refused reservation (the per-user limit) gives the admission back.
	a := e.admit(pid, 1)[0]
	if _, err := e.rdb.Set(context.Background(), lua.ShardKeys(pid, lua.HomeShard(a.UserID, 4)).User(a.UserID), 1, time.Hour).Result(); err != nil {
		t.Fatal(err)
	}
	e.buy(a.UserID, pid, 1, "over").wantError(t, 409, CodePurchaseLimitExceeded)
	if _, _, st := e.place(a.UserID, pid); st != "ADMITTED" {
		t.Fatalf("after a refused order: %s, want the admission kept", st)
	}
	st, _ := lua.ReadRoom(context.Background(), e.rdb, pid)
	if !st.Sharded || st.Claimed != 3 {
		t.Fatalf("room: %+v", st)
	}
	left, _ := lua.UnitsLeft(context.Background(), e.rdb, pid, 4)
	if left != 37 {
		t.Fatalf("%d units left, want 37", left)
	}
}

// Proof-of-work: a room that asks for it gives no ticket without one; a
// solved challenge buys one ticket, for its user only, once.
func TestProofOfWorkOnceForOneUser(t *testing.T) {
	e := newEnv(t)
	pid := e.roomProduct(10)
	path := fmt.Sprintf("/api/admin/products/%d/waiting-room", pid)
	e.do("GET", fmt.Sprintf("/api/products/%d/queue/challenge", pid), token(t, 1), nil).wantError(t, 409, CodePowNotRequired)
	if r := e.do("POST", path, token(t, adminID), map[string]any{"on": true, "powCost": 2000}); r.status != 200 {
		t.Fatalf("pow on: %s", r)
	}
	queue := func(user int64, payload string) resp {
		var body any
		if payload != "" {
			body = map[string]any{"altcha": payload}
		}
		return e.do("POST", fmt.Sprintf("/api/products/%d/queue", pid), token(t, user), body)
	}
	queue(1, "").wantError(t, 403, CodePowRequired)
	payload := solveChallenge(t, e, 1, pid)
	queue(2, payload).wantError(t, 403, CodePowInvalid) // another user's
	queue(1, "bm90IGpzb24=").wantError(t, 403, CodePowInvalid)
	if r := queue(1, payload); r.status != 200 || r.json(t)["state"] != "WAITING" {
		t.Fatalf("ticket with a solved challenge: %s", r)
	}
	if r := queue(1, ""); r.status != 200 {
		t.Fatalf("asking again for the live ticket needs no new proof: %s", r)
	}
	// Buy with it, then try the same solution for a new ticket.
	e.admit(pid, 1)
	e.accepted(1, pid, 1, "pow")
	queue(1, payload).wantError(t, 409, CodePowReused)
	if r := queue(1, solveChallenge(t, e, 1, pid)); r.status != 200 {
		t.Fatalf("a new challenge buys a new ticket: %s", r)
	}
	// Expired: the gate refuses a payload past its expiry.
	if err := e.srv.room.VerifyPow(payload, 1, pid, time.Now().Add(time.Hour)); !errors.Is(err, httpapi.ErrPowInvalid) {
		t.Fatalf("an expired solution: %v", err)
	}
	if err := e.srv.room.VerifyPow(payload, 1, pid+1, time.Now()); !errors.Is(err, httpapi.ErrPowInvalid) {
		t.Fatalf("another product's solution: %v", err)
	}
}
