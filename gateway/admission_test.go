package gateway

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
)

// ordersOf counts the reservations of userID in every intake stream of
// pid's shards (what the writers would turn into orders).
func (e *env) ordersOf(pid int64, shards int, userID int64) int {
	e.t.Helper()
	n := 0
	for sh := range shards {
		entries, err := e.rdb.XRange(context.Background(), lua.ShardKeys(pid, sh).Intake(), "-", "+").Result()
		if err != nil {
			e.t.Fatal(err)
		}
		for _, en := range entries {
			if en.Values[lua.FieldUser] == strconv.FormatInt(userID, 10) {
				n++
			}
		}
	}
	return n
}

// spendOneAdmission is the review's sequence as one admitted buyer of a
// sharded room product: one intent accepted, then other requestIds, each
// after the first requestId sent again with another quantity (422). Every
// other requestId must answer 409 NOT_ADMITTED: the admission was spent.
func (e *env) spendOneAdmission(user, pid int64) {
	e.t.Helper()
	e.accepted(user, pid, 1, "A")
	e.buy(user, pid, 1, "B").wantError(e.t, 409, CodeNotAdmitted)
	for _, rid := range []string{"B", "C", "D"} {
		e.buy(user, pid, 2, "A").wantError(e.t, 422, CodeIdempotencyKeyReused)
		if r := e.buy(user, pid, 1, rid); r.status != 409 {
			e.t.Fatalf("user %d, requestId %s after a 422 on A: %s, want 409 NOT_ADMITTED (the admission was used by A)", user, rid, r)
		}
	}
	if r := e.buy(user, pid, 1, "A"); r.status != 200 {
		e.t.Fatalf("replay of A: %s", r)
	}
}

// One admission to a sharded product's room buys one order, whatever
// requestIds and quantities the buyer sends after it: a 422 for a reused
// requestId never gives the admission back (before, the gateway gave it
// back after every refusal but a duplicate, and the buyer ordered again
// with a new requestId after each 422).
func TestShardedRoomAdmissionBuysOneOrder(t *testing.T) {
	e := newEnv(t)
	spec := roomSale(40)
	spec["shards"] = 4
	pid := e.roomProductWith(spec)
	e.place(1, pid)
	a := e.admit(pid, 1)[0]
	e.spendOneAdmission(a.UserID, pid)
	if n := e.ordersOf(pid, 4, a.UserID); n != 1 {
		t.Fatalf("user %d has %d reservations from one admission, want 1", a.UserID, n)
	}
	st, err := lua.ReadRoom(context.Background(), e.rdb, pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Admitted != 1 || st.Claimed != 1 || st.Live != 0 {
		t.Fatalf("room after one admission and one order: %+v", st)
	}
	if left, _ := lua.UnitsLeft(context.Background(), e.rdb, pid, 4); left != 39 {
		t.Fatalf("%d units left, want 39", left)
	}
}

// A draw on a sharded product: 2 shards, 3 units, 3 winners; a winner who
// sends new requestIds after a 422 still orders once, and the two other
// winners get their unit (before, one winner took all 3 and the others got
// SOLD_OUT).
func TestShardedDrawOneOrderPerWin(t *testing.T) {
	e := newEnv(t)
	p := openSale(3)
	now := time.Now().UTC()
	p.SaleStart, p.SaleEnd = now.Add(time.Hour).Format(time.RFC3339), now.Add(2*time.Hour).Format(time.RFC3339)
	p.MaxPerOrder = 1
	p.Shards = 2
	pid := e.product(p)
	admin := token(t, adminID)
	if r := e.do("POST", fmt.Sprintf("/api/admin/products/%d/waiting-room", pid), admin, map[string]any{"on": true, "mode": "draw"}); r.status != 200 {
		t.Fatalf("draw on: %s", r)
	}
	for u := int64(1); u <= 3; u++ {
		if _, _, st := e.place(u, pid); st != "PRE_QUEUE" {
			t.Fatalf("entry of %d: %s", u, st)
		}
	}
	e.open(pid, 2)
	wins := e.admit(pid, 3)
	e.spendOneAdmission(wins[0].UserID, pid)
	for _, w := range wins[1:] {
		e.accepted(w.UserID, pid, 1, "w")
	}
	for _, w := range wins {
		if n := e.ordersOf(pid, 2, w.UserID); n != 1 {
			t.Fatalf("winner %d has %d reservations, want 1", w.UserID, n)
		}
		if _, _, st := e.place(w.UserID, pid); st != "ORDERED" {
			t.Fatalf("winner %d: %s, want ORDERED", w.UserID, st)
		}
	}
}

// open moves pid's sale start (every shard) to a second ago: the opening.
func (e *env) open(pid int64, shards int) {
	e.t.Helper()
	for sh := range shards {
		if err := e.rdb.HSet(context.Background(), lua.ShardKeys(pid, sh).Stock(), "start", time.Now().Add(-time.Second).UnixMilli()).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}
