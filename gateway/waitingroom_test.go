package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

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
	r := e.do("POST", "/api/admin/products", token(e.t, adminID), roomSale(stock))
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
func (e *env) place(user, pid int64) (ticket, position int64, state string) {
	e.t.Helper()
	r := e.queue(user, pid)
	if r.status != 200 {
		e.t.Fatalf("queue of user %d: %s", user, r)
	}
	m := r.json(e.t)
	ticket, _ = m["ticket"].(json.Number).Int64()
	position, _ = m["position"].(json.Number).Int64()
	return ticket, position, m["state"].(string)
}

// admit runs pacer steps at rate until n buyers were admitted.
func (e *env) admit(pid int64, n int) []lua.Admission {
	e.t.Helper()
	var out []lua.Admission
	deadline := time.Now().Add(5 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		res, err := lua.Admit(context.Background(), e.rdb, pid, lua.AdmitArgs{Rate: 1000, Max: n - len(out), MaxElapsed: time.Second, Window: time.Minute})
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
	for u := int64(1); u <= 3; u++ {
		if tk, pos, st := e.place(u, pid); tk != u || pos != u || st != "WAITING" {
			t.Fatalf("user %d: ticket %d position %d %s", u, tk, pos, st)
		}
	}
	if r := e.queue(2, pid); r.json(t)["ticket"].(json.Number).String() != "2" || r.json(t)["etaSeconds"] != nil {
		t.Fatalf("asking again: %s (want ticket 2, no estimate before the pacer ran)", r)
	}
	e.buy(1, pid, 1, "a").wantError(t, 409, CodeNotAdmitted)

	if a := e.admit(pid, 1); a[0].UserID != 1 {
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
	if tk, pos, st := e2.place(3, pid); tk != 3 || pos != 1 || st != "WAITING" {
		t.Fatalf("user 3 through the restarted gateway: ticket %d position %d %s", tk, pos, st)
	}
}

// Bad input is 400 and a product without a room answers WAITING_ROOM_OFF;
// the admin endpoint turns the room off and on.
func TestWaitingRoomInputsAndToggle(t *testing.T) {
	e := newEnv(t)
	bad := roomSale(5)
	bad["waitingRoom"] = "yes"
	e.do("POST", "/api/admin/products", token(t, adminID), malformed(bad)).wantError(t, 400, CodeInvalidArgument)
	sharded := roomSale(5)
	sharded["shards"] = 2
	e.do("POST", "/api/admin/products", token(t, adminID), sharded).wantError(t, 400, CodeInvalidArgument)

	plain := e.product(openSale(5))
	e.queue(1, plain).wantError(t, 409, CodeWaitingRoomOff)
	e.queue(1, 999999).wantError(t, 404, CodeProductNotFound)
	e.do("POST", "/api/products/x/queue", token(t, 1), malformed(nil)).wantError(t, 404, CodeProductNotFound)

	path := fmt.Sprintf("/api/admin/products/%d/waiting-room", plain)
	e.do("POST", path, token(t, 1), map[string]any{"on": true}).wantError(t, 403, CodeForbidden)
	e.do("POST", path, token(t, adminID), malformed(map[string]any{"on": 1})).wantError(t, 400, CodeInvalidArgument)
	e.do("POST", path, token(t, adminID), malformed(map[string]any{"on": true, "windowSeconds": 0})).wantError(t, 400, CodeInvalidArgument)
	e.do("POST", path, token(t, adminID), malformed(map[string]any{"on": true, "ceiling": -1})).wantError(t, 400, CodeInvalidArgument)
	if r := e.do("POST", path, token(t, adminID), map[string]any{"on": true, "ceiling": 50, "windowSeconds": 30}); r.status != 200 {
		t.Fatalf("turn on: %s", r)
	}
	if r := e.do("GET", fmt.Sprintf("/api/products/%d", plain), "", nil); r.json(t)["waitingRoom"] != true {
		t.Fatalf("product after turning the room on: %s", r)
	}
	e.buy(1, plain, 1, "x").wantError(t, 409, CodeNotAdmitted)
	if r := e.do("POST", path, token(t, adminID), map[string]any{"on": false}); r.status != 200 {
		t.Fatalf("turn off: %s", r)
	}
	e.accepted(1, plain, 1, "x")
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

	const rate = 100.0
	start := time.Now()
	var mu sync.Mutex
	admitted := map[int64]int64{} // user → ticket
	for range 2 {
		wg.Go(func() {
			for time.Since(start) < 400*time.Millisecond {
				res, err := lua.Admit(context.Background(), e.rdb, pid, lua.AdmitArgs{Rate: rate, Max: 100, MaxElapsed: time.Second, Window: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, a := range res.Admitted {
					admitted[a.UserID] = a.Ticket
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
	var maxTicket int64
	for _, tk := range admitted {
		maxTicket = max(maxTicket, tk)
	}
	if maxTicket != int64(len(admitted)) {
		t.Fatalf("admitted %d buyers up to ticket %d: not in ticket order", len(admitted), maxTicket)
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

// The queue answer and the push service's queue message (push/line.go's
// sendLocked) agree on every field they share for the same state: WAITING
// has an estimate once the rate is known, ADMITTED has position 0 and
// estimate 0, SOLD_OUT keeps its position and has no estimate (null; the
// HTTP answer said ceil(position/rate) before, push null).
func TestPlaceJSONAgreesWithPush(t *testing.T) {
	deadline := time.Now().Add(time.Minute)
	eta := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		place    lua.Place
		position int64
		eta      *int64
	}{
		{lua.Place{Ticket: 9, State: lua.PlaceWaiting, Position: 5, Rate: 2}, 5, eta(3)},
		{lua.Place{Ticket: 9, State: lua.PlaceWaiting, Position: 5}, 5, nil},
		{lua.Place{Ticket: 9, State: lua.PlaceAdmitted, Rate: 2, Deadline: deadline}, 0, eta(0)},
		{lua.Place{Ticket: 9, State: lua.PlaceSoldOut, Position: 5, Rate: 2}, 5, nil},
		{lua.Place{Ticket: 9, State: lua.PlaceSoldOut, Position: 5}, 5, nil},
	} {
		got := toPlaceJSON(7, tc.place)
		if got.ProductID != 7 || got.Ticket != 9 || got.State != string(tc.place.State) || got.Position != tc.position ||
			(got.EtaSeconds == nil) != (tc.eta == nil) || (tc.eta != nil && *got.EtaSeconds != *tc.eta) {
			t.Errorf("%+v: %+v (eta %v), want position %d eta %v", tc.place, got, got.EtaSeconds, tc.position, tc.eta)
		}
	}
}
