package lua_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
)

func roomOn(t *testing.T, rdb *redis.Client, pid int64, avail int64, window time.Duration) lua.Keys {
	t.Helper()
	k := loadShard(t, rdb, pid, open(avail))
	if err := lua.SetRoom(context.Background(), rdb, pid, lua.RoomSettings{On: true, Window: window}); err != nil {
		t.Fatal(err)
	}
	return k
}

func admitted(rdb *redis.Client, k lua.Keys, no string, user int64) (lua.ReserveResult, error) {
	return lua.Reserve(context.Background(), rdb, k, lua.ReserveArgs{OrderNo: no, UserID: user, RequestID: "r" + no,
		Quantity: 1, TTL: time.Hour, Admission: true})
}

// Tickets follow arrival order, asking again returns the same ticket, and a
// pacer admits in ticket order; an order needs a live admission, which it uses.
func TestRoomFairAndAdmissionRequired(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := roomOn(t, rdb, 21, 100, time.Minute)

	users := []int64{50, 7, 33, 12, 90}
	for i, u := range users {
		p, err := lua.Take(ctx, rdb, 21, u)
		if err != nil || p.Ticket != int64(i+1) || p.Position != int64(i+1) || p.State != lua.PlaceWaiting {
			t.Fatalf("take %d: %+v %v", u, p, err)
		}
	}
	if p, _ := lua.Take(ctx, rdb, 21, 33); p.Ticket != 3 || p.Position != 3 {
		t.Fatalf("second take of user 33: %+v, want ticket 3 again", p)
	}
	// The room is on: without the admissions key the script asks for it;
	// with it, a buyer not yet admitted is refused and nothing is taken.
	if _, err := reserve(rdb, k, "o0", 50, "x", 1); !errors.Is(err, lua.ErrRoomOn) {
		t.Fatalf("reserve without admission key: %v, want ErrRoomOn", err)
	}
	if _, err := admitted(rdb, k, "o1", 50); !errors.Is(err, lua.ErrNotAdmitted) {
		t.Fatalf("reserve before admission: %v, want ErrNotAdmitted", err)
	}
	if n, _ := rdb.XLen(ctx, k.Intake()).Result(); n != 0 {
		t.Fatalf("intake has %d entries after refused orders", n)
	}

	var order []int64
	for len(order) < len(users) {
		res, err := lua.Admit(ctx, rdb, 21, lua.AdmitArgs{Rate: 100, Max: 2, MaxElapsed: time.Second, Window: time.Minute})
		if err != nil || !res.On {
			t.Fatalf("admit: %+v %v", res, err)
		}
		for _, a := range res.Admitted {
			order = append(order, a.UserID)
		}
		time.Sleep(15 * time.Millisecond)
	}
	if fmt.Sprint(order) != fmt.Sprint(users) {
		t.Fatalf("admitted %v, want ticket order %v", order, users)
	}
	p, err := lua.Take(ctx, rdb, 21, 7)
	if err != nil || p.State != lua.PlaceAdmitted || p.Ticket != 2 || time.Until(p.Deadline) < 30*time.Second {
		t.Fatalf("take of an admitted user: %+v %v", p, err)
	}
	if r, err := admitted(rdb, k, "o2", 7); err != nil || r.Available != 99 {
		t.Fatalf("admitted order: %+v %v", r, err)
	}
	// The admission is used: a second intent is refused, the replay is not.
	if _, err := admitted(rdb, k, "o3", 7); !errors.Is(err, lua.ErrNotAdmitted) {
		t.Fatalf("second order on one admission: %v", err)
	}
	if r, err := admitted(rdb, k, "o2", 7); !errors.Is(err, lua.ErrDuplicate) || r.OrderNo != "o2" {
		t.Fatalf("replay after the admission was used: %+v %v", r, err)
	}
	// A used ticket is finished: taking again queues at the end.
	if p, _ := lua.Take(ctx, rdb, 21, 7); p.Ticket != 6 || p.State != lua.PlaceWaiting || p.Position != 1 {
		t.Fatalf("take after buying: %+v, want ticket 6 next in line", p)
	}
}

// An admission not used within the window expires and its place passes to
// the next in line on top of the rate.
func TestRoomExpiryPassesPlaceOn(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := roomOn(t, rdb, 22, 10, 150*time.Millisecond)
	for u := int64(1); u <= 3; u++ {
		if _, err := lua.Take(ctx, rdb, 22, u); err != nil {
			t.Fatal(err)
		}
	}
	// First step: no time has passed, nothing admitted; then 1 per 10 s.
	slow := lua.AdmitArgs{Rate: 0.1, Max: 10, MaxElapsed: time.Second, Window: time.Minute}
	lua.Admit(ctx, rdb, 22, slow)
	if err := rdb.HSet(ctx, lua.Room(22).State(), "carry", 999).Err(); err != nil { // one admission is due
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	res, err := lua.Admit(ctx, rdb, 22, slow)
	if err != nil || len(res.Admitted) != 1 || res.Admitted[0].UserID != 1 {
		t.Fatalf("first admission: %+v %v", res, err)
	}
	time.Sleep(200 * time.Millisecond) // user 1's window passes unused
	res, err = lua.Admit(ctx, rdb, 22, slow)
	if err != nil || res.Expired != 1 || len(res.Admitted) != 1 || res.Admitted[0].UserID != 2 {
		t.Fatalf("after expiry: %+v %v; want user 1 expired and user 2 admitted", res, err)
	}
	if _, err := admitted(rdb, k, "o1", 1); !errors.Is(err, lua.ErrNotAdmitted) {
		t.Fatalf("order on an expired admission: %v", err)
	}
	if _, err := admitted(rdb, k, "o2", 2); err != nil {
		t.Fatalf("order of the next in line: %v", err)
	}
	st, err := lua.ReadRoom(ctx, rdb, 22)
	if err != nil || !st.On || st.Issued != 3 || st.UpTo != 2 || st.Expired != 1 || st.Admitted != 2 || st.Waiting() != 1 || st.Live != 0 {
		t.Fatalf("room status %+v %v", st, err)
	}
}

// Pacers running at once share one budget: together they never admit more
// than rate × time (+1 for the fraction carried).
func TestRoomConcurrentPacersNeverOverAdmit(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	roomOn(t, rdb, 23, 100000, time.Minute)
	for u := int64(1); u <= 2000; u++ {
		if _, err := lua.Take(ctx, rdb, 23, u); err != nil {
			t.Fatal(err)
		}
	}
	const rate = 200.0
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int64]bool{}
	for range 4 {
		wg.Go(func() {
			for time.Since(start) < 500*time.Millisecond {
				res, err := lua.Admit(ctx, rdb, 23, lua.AdmitArgs{Rate: rate, Max: 2000, MaxElapsed: time.Second, Window: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, a := range res.Admitted {
					if seen[a.UserID] {
						t.Errorf("user %d admitted twice", a.UserID)
					}
					seen[a.UserID] = true
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	st, _ := lua.ReadRoom(ctx, rdb, 23)
	if limit := int64(rate*elapsed.Seconds()) + 1; st.UpTo > limit || int64(len(seen)) != st.UpTo {
		t.Fatalf("admitted %d (%d users) in %v at %v/s: more than %d", st.UpTo, len(seen), elapsed, rate, limit)
	}
	for u := int64(1); u <= st.UpTo; u++ {
		if !seen[u] {
			t.Fatalf("user %d (ticket %d) not admitted although ticket %d was", u, u, st.UpTo)
		}
	}
}

// Once the stock is gone nobody is admitted and no ticket is given; a waiting
// buyer keeps the place and moves again when units come back.
func TestRoomSoldOut(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := roomOn(t, rdb, 24, 1, time.Minute)
	lua.Take(ctx, rdb, 24, 1)
	lua.Take(ctx, rdb, 24, 2)
	lua.Admit(ctx, rdb, 24, lua.AdmitArgs{Rate: 1000, Max: 1, MaxElapsed: time.Second, Window: time.Minute})
	time.Sleep(5 * time.Millisecond)
	if res, _ := lua.Admit(ctx, rdb, 24, lua.AdmitArgs{Rate: 1000, Max: 1, MaxElapsed: time.Second, Window: time.Minute}); len(res.Admitted) != 1 {
		t.Fatalf("admit: %+v", res)
	}
	if _, err := admitted(rdb, k, "o1", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := lua.Take(ctx, rdb, 24, 3); !errors.Is(err, lua.ErrSoldOut) {
		t.Fatalf("take after the sell-out: %v", err)
	}
	if p, err := lua.Take(ctx, rdb, 24, 2); err != nil || p.State != lua.PlaceSoldOut || p.Position != 1 {
		t.Fatalf("waiting buyer after the sell-out: %+v %v", p, err)
	}
	time.Sleep(5 * time.Millisecond)
	if res, _ := lua.Admit(ctx, rdb, 24, lua.AdmitArgs{Rate: 1000, Max: 5, MaxElapsed: time.Second, Window: time.Minute}); len(res.Admitted) != 0 {
		t.Fatalf("admitted while sold out: %+v", res)
	}
	if _, _, err := lua.Release(ctx, rdb, k, "o1", 1, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if p, _ := lua.Take(ctx, rdb, 24, 2); p.State != lua.PlaceWaiting {
		t.Fatalf("after the release: %+v, want WAITING", p)
	}
}
