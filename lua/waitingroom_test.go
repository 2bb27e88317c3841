package lua_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/drop"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
)

var testSeed = drop.Seed{1, 2, 3, 4, 5}

func roomOn(t *testing.T, rdb *redis.Client, pid int64, avail int64, window time.Duration) lua.Keys {
	t.Helper()
	return roomWith(t, rdb, pid, open(avail), lua.RoomSettings{On: true, Window: window})
}

// roomWith loads a one-shard product and turns its room on with rs.
func roomWith(t testing.TB, rdb *redis.Client, pid int64, s lua.ShardStock, rs lua.RoomSettings) lua.Keys {
	t.Helper()
	k := loadShard(t, rdb, pid, s)
	rs.Commitment = testSeed.Commitment()
	if err := lua.SetRoom(context.Background(), rdb, pid, rs); err != nil {
		t.Fatal(err)
	}
	return k
}

// openRoom runs what a pacer does at the opening: the first step, which
// asks for the shuffle, and the shuffle (of an empty pre-queue for a room
// turned on during the sale).
func openRoom(t testing.TB, rdb *redis.Client, pid int64, mode lua.RoomMode) {
	t.Helper()
	ctx := context.Background()
	res, err := lua.Admit(ctx, rdb, pid, lua.AdmitArgs{Rate: 0, Max: 1, MaxElapsed: time.Second, Window: time.Minute, Left: -1})
	if err != nil || res.Code != lua.AdmitShuffle {
		t.Fatalf("first step after the opening: %+v %v, want AdmitShuffle", res, err)
	}
	if ok, err := lua.ShuffleRoom(ctx, rdb, pid, mode, testSeed, -1); err != nil || !ok {
		t.Fatalf("shuffle: %v %v", ok, err)
	}
}

func take(rdb *redis.Client, pid, user int64) (lua.Place, error) {
	return lua.Take(context.Background(), rdb, pid, lua.TakeArgs{UserID: user, TicketID: fmt.Sprintf("%016x", 0xabc0000+user)})
}

func mustTake(t *testing.T, rdb *redis.Client, pid, user int64) lua.Place {
	t.Helper()
	p, err := take(rdb, pid, user)
	if err != nil {
		t.Fatalf("take of user %d: %+v %v", user, p, err)
	}
	return p
}

// lineAdmittingFirst turns pid's fifo room on (avail units, admissions
// lasting window), gives users 1…users a ticket each in that order, opens
// the room and admits user 1; it returns the stock's keys.
func lineAdmittingFirst(t *testing.T, rdb *redis.Client, pid, avail int64, window time.Duration, users int64) lua.Keys {
	t.Helper()
	k := roomOn(t, rdb, pid, avail, window)
	for u := int64(1); u <= users; u++ {
		mustTake(t, rdb, pid, u)
	}
	openRoom(t, rdb, pid, lua.ModeFIFO)
	time.Sleep(5 * time.Millisecond)
	if res, err := step(rdb, pid, 10000, 1); err != nil || len(res.Admitted) != 1 {
		t.Fatalf("admit user 1: %+v %v", res, err)
	}
	return k
}

func step(rdb *redis.Client, pid int64, rate float64, maxN int) (lua.AdmitResult, error) {
	return lua.Admit(context.Background(), rdb, pid, lua.AdmitArgs{Rate: rate, Max: maxN, MaxElapsed: time.Second, Window: time.Minute, Left: -1})
}

func admitted(rdb *redis.Client, k lua.Keys, no string, user int64) (lua.ReserveResult, error) {
	return lua.Reserve(context.Background(), rdb, k, lua.ReserveArgs{OrderNo: no, UserID: user, RequestID: "r" + no,
		Quantity: 1, TTL: time.Hour, Admission: true})
}

// setStart moves a product's opening (the stock hash's start), as the clock
// passing it would.
func setStart(t *testing.T, rdb *redis.Client, pid int64, at time.Time) {
	t.Helper()
	if err := rdb.HSet(context.Background(), lua.Room(pid).Stock(), "start", at.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
}

// Tickets after the opening follow arrival order, asking again returns the
// same ticket, and a pacer admits in that order; an order needs a live
// admission, which it uses.
func TestRoomFairAndAdmissionRequired(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := roomOn(t, rdb, 21, 100, time.Minute)

	users := []int64{50, 7, 33, 12, 90}
	tickets := map[int64]string{}
	for i, u := range users {
		p := mustTake(t, rdb, 21, u)
		if !drop.ValidTicketID(p.Ticket) || p.Position != int64(i+1) || p.State != lua.PlaceWaiting || p.Mode != lua.ModeFIFO {
			t.Fatalf("take %d: %+v", u, p)
		}
		tickets[u] = p.Ticket
	}
	if p, _ := lua.Take(ctx, rdb, 21, lua.TakeArgs{UserID: 33, TicketID: "00000000000000ff"}); p.Ticket != tickets[33] || p.Position != 3 {
		t.Fatalf("second take of user 33: %+v, want its ticket again", p)
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
	// No admission before the opening's shuffle is published.
	if res, err := step(rdb, 21, 1000, 5); err != nil || res.Code != lua.AdmitShuffle || len(res.Admitted) != 0 {
		t.Fatalf("step before the shuffle: %+v %v", res, err)
	}
	openRoom(t, rdb, 21, lua.ModeFIFO)

	var order []int64
	for len(order) < len(users) {
		res, err := step(rdb, 21, 100, 2)
		if err != nil || !res.On {
			t.Fatalf("admit: %+v %v", res, err)
		}
		for _, a := range res.Admitted {
			order = append(order, a.UserID)
			if a.Ticket != tickets[a.UserID] {
				t.Fatalf("admission %+v carries another ticket than %s", a, tickets[a.UserID])
			}
		}
		time.Sleep(15 * time.Millisecond)
	}
	if fmt.Sprint(order) != fmt.Sprint(users) {
		t.Fatalf("admitted %v, want arrival order %v", order, users)
	}
	p := mustTake(t, rdb, 21, 7)
	if p.State != lua.PlaceAdmitted || p.Ticket != tickets[7] || time.Until(p.Deadline) < 30*time.Second {
		t.Fatalf("take of an admitted user: %+v", p)
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
	if p, _ := lua.Take(ctx, rdb, 21, lua.TakeArgs{UserID: 7, TicketID: "00000000000000aa"}); p.Ticket != "00000000000000aa" || p.State != lua.PlaceWaiting || p.Position != 1 {
		t.Fatalf("take after buying: %+v, want a new ticket next in line", p)
	}
}

// An admission not used within the window expires and its place passes to
// the next in line on top of the rate.
func TestRoomExpiryPassesPlaceOn(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := roomOn(t, rdb, 22, 10, 150*time.Millisecond)
	for u := int64(1); u <= 3; u++ {
		mustTake(t, rdb, 22, u)
	}
	openRoom(t, rdb, 22, lua.ModeFIFO)
	// First step: no time has passed, nothing admitted; then 1 per 10 s.
	step(rdb, 22, 0.1, 10)
	if err := rdb.HSet(ctx, lua.Room(22).State(), "carry", 999).Err(); err != nil { // one admission is due
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	res, err := step(rdb, 22, 0.1, 10)
	if err != nil || len(res.Admitted) != 1 || res.Admitted[0].UserID != 1 {
		t.Fatalf("first admission: %+v %v", res, err)
	}
	time.Sleep(200 * time.Millisecond) // user 1's window passes unused
	res, err = step(rdb, 22, 0.1, 10)
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
		mustTake(t, rdb, 23, u)
	}
	// The room's allowance runs from its opening: the bound's clock starts
	// before it (a loaded machine took ~10 ms between the two, which made a
	// correct 102nd admission look like one too many).
	start := time.Now()
	openRoom(t, rdb, 23, lua.ModeFIFO)
	const rate = 200.0
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int64]bool{}
	for range 4 {
		wg.Go(func() {
			for time.Since(start) < 500*time.Millisecond {
				res, err := step(rdb, 23, rate, 2000)
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
			t.Fatalf("user %d (place %d) not admitted although place %d was", u, u, st.UpTo)
		}
	}
}

// Once the stock is gone nobody is admitted and no ticket is given; a waiting
// buyer keeps the place and moves again when units come back.
func TestRoomSoldOut(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := lineAdmittingFirst(t, rdb, 24, 1, time.Minute, 2)
	if _, err := admitted(rdb, k, "o1", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := take(rdb, 24, 3); !errors.Is(err, lua.ErrSoldOut) {
		t.Fatalf("take after the sell-out: %v", err)
	}
	if p, err := take(rdb, 24, 2); err != nil || p.State != lua.PlaceSoldOut || p.Position != 1 {
		t.Fatalf("waiting buyer after the sell-out: %+v %v", p, err)
	}
	time.Sleep(5 * time.Millisecond)
	if res, _ := step(rdb, 24, 1000, 5); len(res.Admitted) != 0 {
		t.Fatalf("admitted while sold out: %+v", res)
	}
	if _, _, err := lua.Release(ctx, rdb, k, "o1", 1, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if p, _ := take(rdb, 24, 2); p.State != lua.PlaceWaiting {
		t.Fatalf("after the release: %+v, want WAITING", p)
	}
}

// A step never admits more buyers than units not spoken for: live
// admissions never exceed the units left.
func TestRoomAdmissionsBoundedByUnitsLeft(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	k := roomOn(t, rdb, 25, 5, time.Minute)
	for u := int64(1); u <= 20; u++ {
		mustTake(t, rdb, 25, u)
	}
	openRoom(t, rdb, 25, lua.ModeFIFO)
	time.Sleep(20 * time.Millisecond)
	res, err := step(rdb, 25, 100000, 2000)
	if err != nil || len(res.Admitted) != 5 {
		t.Fatalf("step with 5 units and 20 waiting: %+v %v, want 5 admitted", res, err)
	}
	time.Sleep(20 * time.Millisecond)
	if res, _ := step(rdb, 25, 100000, 2000); len(res.Admitted) != 0 {
		t.Fatalf("admitted beyond the units left: %+v", res)
	}
	if _, err := admitted(rdb, k, "o1", 1); err != nil { // one unit sold: 4 left, 4 live
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if res, _ := step(rdb, 25, 100000, 2000); len(res.Admitted) != 0 {
		t.Fatalf("a sale freed no unit, yet admitted: %+v", res)
	}
	st, _ := lua.ReadRoom(ctx, rdb, 25)
	if st.Live > st.Available {
		t.Fatalf("live admissions %d > units left %d", st.Live, st.Available)
	}
	// With an overbook of 3, three more: live admissions at most units left + 3.
	time.Sleep(20 * time.Millisecond)
	res, err = lua.Admit(ctx, rdb, 25, lua.AdmitArgs{Rate: 100000, Max: 2000, MaxElapsed: time.Second, Window: time.Minute, Left: -1, Overbook: 3})
	if st, _ := lua.ReadRoom(ctx, rdb, 25); err != nil || len(res.Admitted) != 3 || st.Live != st.Available+3 {
		t.Fatalf("overbook 3: %+v %v, live %d for %d units", res, err, st.Live, st.Available)
	}
}

// No admission while the sale is paused, and no admission expires then;
// after the resume the live admissions' deadlines moved by the pause.
func TestRoomPausedAdmitsNobody(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	lineAdmittingFirst(t, rdb, 26, 100, 300*time.Millisecond, 10)
	before, _ := rdb.ZScore(ctx, lua.Room(26).Admitted(), "1").Result()
	rdb.HSet(ctx, lua.Room(26).Stock(), "paused", "1")
	if res, _ := step(rdb, 26, 10000, 100); res.Code != lua.AdmitPaused {
		t.Fatalf("step once paused: %+v", res)
	}
	for range 4 {
		time.Sleep(100 * time.Millisecond)
		res, err := step(rdb, 26, 10000, 100)
		if err != nil || res.Code != lua.AdmitPaused || len(res.Admitted) != 0 || res.Expired != 0 {
			t.Fatalf("step while paused: %+v %v", res, err)
		}
	}
	// A waiting buyer is told rate 0 while paused (no wait can be estimated).
	if p := mustTake(t, rdb, 26, 5); p.State != lua.PlaceWaiting || p.Rate != 0 {
		t.Fatalf("waiting ticket while paused: %+v, want WAITING at rate 0", p)
	}
	rdb.HSet(ctx, lua.Room(26).Stock(), "paused", "0")
	if p := mustTake(t, rdb, 26, 5); p.Rate == 0 {
		t.Fatalf("waiting ticket after the resume: %+v, want the last step's rate", p)
	}
	res, err := step(rdb, 26, 10000, 1)
	if err != nil || res.Code != lua.AdmitStepped || res.Expired != 0 {
		t.Fatalf("first step after the pause: %+v %v (user 1's window would have passed without the shift)", res, err)
	}
	after, _ := rdb.ZScore(ctx, lua.Room(26).Admitted(), "1").Result()
	if after-before < 350 {
		t.Fatalf("deadline moved by %v ms across a pause of about 400 ms", after-before)
	}
}

// Once the sale ended a ticket's place in line and a live admission are
// over: both are answered NOT_ACTIVE, as a new ticket is; a draw's result
// stays (LOST), being final.
func TestRoomTakeAfterTheEnd(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	lineAdmittingFirst(t, rdb, 31, 100, time.Minute, 3)
	if p := mustTake(t, rdb, 31, 1); p.State != lua.PlaceAdmitted {
		t.Fatalf("user 1 before the end: %+v", p)
	}
	rdb.HSet(ctx, lua.Room(31).Stock(), "end", time.Now().Add(-time.Second).UnixMilli())
	for _, u := range []int64{1, 2, 4} { // admitted, waiting, new
		if p, err := take(rdb, 31, u); !errors.Is(err, lua.ErrNotActive) {
			t.Errorf("user %d after the end: %+v %v, want ErrNotActive", u, p, err)
		}
	}

	// A draw: user 2's entry lost; after the end it is still LOST.
	s := open(1)
	s.SaleStart = time.Now().Add(time.Hour)
	roomWith(t, rdb, 32, s, lua.RoomSettings{On: true, Window: time.Minute, Mode: lua.ModeDraw})
	mustTake(t, rdb, 32, 1)
	mustTake(t, rdb, 32, 2)
	setStart(t, rdb, 32, time.Now().Add(-time.Minute))
	openRoom(t, rdb, 32, lua.ModeDraw)
	rdb.HSet(ctx, lua.Room(32).Stock(), "end", time.Now().Add(-time.Second).UnixMilli())
	lost := 0
	for _, u := range []int64{1, 2} {
		p, err := take(rdb, 32, u)
		if err == nil && p.State == lua.PlaceLost {
			lost++
		} else if !errors.Is(err, lua.ErrNotActive) {
			t.Errorf("draw entry of user %d after the end: %+v %v", u, p, err)
		}
	}
	if lost != 1 {
		t.Errorf("%d entries answered LOST after the end, want 1 (one unit, two entries)", lost)
	}
}

// A pre-queued ticket is over once the sale ended too, however it ended:
// before the opening (an admin ended it during the pre-queue), after the
// opening with the shuffle not published (no pacer publishes it now), or
// at the opening itself — NOT_ACTIVE, never PRE_QUEUE or SHUFFLING (an
// outside review's cases).
func TestRoomPreQueuedTicketAfterTheEnd(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	for _, c := range []struct {
		pid        int64
		name       string
		start, end time.Duration
	}{
		{41, "ended before the opening", time.Hour, -time.Second},
		{42, "ended after the opening, shuffle not published", -2 * time.Second, -time.Second},
		{43, "ended at the opening", -time.Second, -time.Second},
	} {
		s := open(10)
		s.SaleStart, s.SaleEnd = time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
		roomWith(t, rdb, c.pid, s, lua.RoomSettings{On: true, Window: time.Minute})
		if p := mustTake(t, rdb, c.pid, 1); p.State != lua.PlacePreQueue {
			t.Fatalf("%s: pre-queue ticket: %+v", c.name, p)
		}
		rdb.HSet(ctx, lua.Room(c.pid).Stock(), "start", time.Now().Add(c.start).UnixMilli(), "end", time.Now().Add(c.end).UnixMilli())
		for _, u := range []int64{2, 1} { // new, pre-queued
			if p, err := take(rdb, c.pid, u); !errors.Is(err, lua.ErrNotActive) {
				t.Errorf("%s: user %d: %s %v, want ErrNotActive", c.name, u, p.State, err)
			}
		}
	}
}

// A user who holds the per-user limit (5 here) gets no new ticket when the
// caller asks for the check (ErrLimitExceeded, nothing written); below it,
// without the check, and for a ticket the user already has, the answers
// are as before.
func TestRoomTakeChecksTheLimit(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	roomOn(t, rdb, 33, 100, time.Minute)
	openRoom(t, rdb, 33, lua.ModeFIFO)
	held := func(u, n int64) {
		if err := rdb.Set(ctx, lua.ShardKeys(33, 0).User(u), n, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	takeChecked := func(u int64) (lua.Place, error) {
		return lua.Take(ctx, rdb, 33, lua.TakeArgs{UserID: u, TicketID: fmt.Sprintf("%016x", 0xcd00+u), CheckLimit: true})
	}
	mustTake(t, rdb, 33, 3) // a ticket before reaching the limit
	held(1, 5)
	held(2, 4)
	held(3, 5)
	if p, err := takeChecked(1); !errors.Is(err, lua.ErrLimitExceeded) {
		t.Fatalf("user 1 at the limit: %+v %v, want ErrLimitExceeded", p, err)
	}
	if n, _ := rdb.HExists(ctx, lua.Room(33).Tickets(), "1").Result(); n {
		t.Fatal("a ticket record was written for a refused request")
	}
	for _, u := range []int64{2, 3} { // below the limit; a ticket taken before
		if p, err := takeChecked(u); err != nil || p.State != lua.PlaceWaiting {
			t.Fatalf("user %d: %+v %v", u, p, err)
		}
	}
	if p := mustTake(t, rdb, 33, 1); p.State != lua.PlaceWaiting { // without the check
		t.Fatalf("user 1 without the check: %+v", p)
	}
}

// The pre-queue: tickets taken before the opening carry no position; at the
// opening they are shuffled, and the published seed and list recompute
// every served position; later tickets queue behind in arrival order, and
// admission follows the shuffle.
func TestRoomPreQueueShuffle(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	const pid = 27
	s := open(1000)
	s.SaleStart = time.Now().Add(time.Hour)
	roomWith(t, rdb, pid, s, lua.RoomSettings{On: true, Window: time.Minute, PreQueue: 2 * time.Hour})
	tickets := map[int64]string{}
	for u := int64(1); u <= 40; u++ {
		p := mustTake(t, rdb, pid, u)
		if p.State != lua.PlacePreQueue || p.Position != 0 || !p.OpensAt.Equal(time.UnixMilli(s.SaleStart.UnixMilli()).UTC()) {
			t.Fatalf("pre-queue ticket: %+v", p)
		}
		tickets[u] = p.Ticket
	}
	if st, _ := lua.ReadRoom(ctx, rdb, pid); st.PreQueued != 40 || st.Seed != "" || st.Commitment != testSeed.Commitment() {
		t.Fatalf("room before the opening: %+v", st)
	}
	if res, _ := step(rdb, pid, 1000, 100); res.Code != lua.AdmitNotOpen || len(res.Admitted) != 0 {
		t.Fatalf("step before the opening: %+v", res)
	}
	setStart(t, rdb, pid, time.Now().Add(-time.Second))
	if p := mustTake(t, rdb, pid, 5); p.State != lua.PlaceShuffling || p.Ticket != tickets[5] {
		t.Fatalf("pre-queued ticket after the opening, before the shuffle: %+v", p)
	}
	late := mustTake(t, rdb, pid, 41) // arrives after the opening: behind the 40
	if late.State != lua.PlaceWaiting || late.Position != 41 || late.ShufflePosition != 0 {
		t.Fatalf("ticket after the opening: %+v", late)
	}
	openRoom(t, rdb, pid, lua.ModeFIFO)

	st, _ := lua.ReadRoom(ctx, rdb, pid)
	if err := drop.Verify(st.Seed, st.Commitment); err != nil || !st.Shuffled || st.ShuffledAt.IsZero() {
		t.Fatalf("published shuffle: %+v %v", st, err)
	}
	list, err := lua.PublishedList(ctx, rdb, pid)
	if err != nil {
		t.Fatal(err)
	}
	lh := drop.ListHash(list)
	if fmt.Sprintf("%x", lh) != st.ListHash {
		t.Fatalf("list hash %x, published %s", lh, st.ListHash)
	}
	seed, _ := drop.ParseSeed(st.Seed)
	byPos := map[int64]int64{}
	for u := int64(1); u <= 40; u++ {
		p := mustTake(t, rdb, pid, u)
		want, err := drop.Position(seed, list, tickets[u])
		if err != nil || p.State != lua.PlaceWaiting || p.ShufflePosition != int64(want) || p.Position != int64(want) {
			t.Fatalf("user %d: served %+v, recomputed position %d (%v)", u, p, want, err)
		}
		byPos[p.Position] = u
	}
	var want []int64
	for pos := int64(1); pos <= 40; pos++ {
		want = append(want, byPos[pos])
	}
	want = append(want, 41)
	var got []int64
	for len(got) < 41 {
		res, err := step(rdb, pid, 5000, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range res.Admitted {
			got = append(got, a.UserID)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("admission order %v, want the shuffle then arrival order %v", got, want)
	}
}

// A pre-queue opening later refuses tickets until then.
func TestRoomPreQueueNotOpen(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	s := open(10)
	s.SaleStart = time.Now().Add(time.Hour)
	roomWith(t, rdb, 28, s, lua.RoomSettings{On: true, Window: time.Minute, PreQueue: 10 * time.Minute})
	p, err := take(rdb, 28, 1)
	if !errors.Is(err, lua.ErrPreQueueNotOpen) || p.Ticket != "" || p.OpensAt.Sub(s.SaleStart) > -9*time.Minute {
		t.Fatalf("take before the pre-queue opens: %+v %v", p, err)
	}
	// The terms are locked only once a ticket exists.
	if err := lua.SetRoom(context.Background(), rdb, 28, lua.RoomSettings{On: true, Window: time.Minute, Mode: lua.ModeDraw,
		Commitment: testSeed.Commitment()}); err != nil {
		t.Fatalf("change of mode before any ticket: %v", err)
	}
	if err := lua.SetRoom(context.Background(), rdb, 28, lua.RoomSettings{On: true, Window: time.Minute,
		Commitment: drop.Seed{9}.Commitment()}); !errors.Is(err, lua.ErrCommitted) {
		t.Fatalf("another commitment: %v, want ErrCommitted", err)
	}
}

// Random mode: every waiting ticket, pre-queued or later, is admitted lowest
// random key first.
func TestRoomRandomAdmission(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	const pid = 29
	s := open(1000)
	s.SaleStart = time.Now().Add(time.Hour)
	roomWith(t, rdb, pid, s, lua.RoomSettings{On: true, Window: time.Minute, Mode: lua.ModeRandom})
	keys := map[int64]float64{}
	for u := int64(1); u <= 30; u++ {
		p := mustTake(t, rdb, pid, u)
		keys[u] = drop.Score(drop.RandomKey(testSeed, p.Ticket))
	}
	setStart(t, rdb, pid, time.Now().Add(-time.Second))
	openRoom(t, rdb, pid, lua.ModeRandom)
	for u := int64(31); u <= 60; u++ { // after the opening: in the same pool
		p := mustTake(t, rdb, pid, u)
		if p.State != lua.PlaceWaiting || p.Position != 0 || p.Mode != lua.ModeRandom {
			t.Fatalf("random-mode ticket: %+v", p)
		}
		keys[u] = drop.Score(drop.RandomKey(testSeed, p.Ticket))
	}
	fresh, err := lua.FreshKeys(ctx, rdb, pid, testSeed)
	if err != nil || len(fresh) != 30 {
		t.Fatalf("fresh keys: %d %v", len(fresh), err)
	}
	res, err := lua.Admit(ctx, rdb, pid, lua.AdmitArgs{Rate: 0, Max: 100, MaxElapsed: time.Second, Window: time.Minute, Left: -1, Keys: fresh})
	if err != nil || res.Waiting != 60 {
		t.Fatalf("keying step: %+v %v", res, err)
	}
	var got []int64
	late := false
	for len(got) < 60 {
		time.Sleep(10 * time.Millisecond)
		res, err := step(rdb, pid, 1000, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range res.Admitted {
			if len(got) > 0 && keys[a.UserID] < keys[got[len(got)-1]] {
				t.Fatalf("user %d (key %v) admitted after user %d (key %v)", a.UserID, keys[a.UserID], got[len(got)-1], keys[got[len(got)-1]])
			}
			got = append(got, a.UserID)
			if a.UserID > 30 && len(got) <= 30 {
				late = true
			}
		}
	}
	if !late {
		t.Fatal("no ticket taken after the opening was admitted among the first 30: not one pool")
	}
	logged, err := lua.ReadRoomLog(ctx, rdb, pid, "0", 100)
	n := 0
	for _, e := range logged {
		n += len(e.Users)
	}
	if err != nil || n != 60 {
		t.Fatalf("room log: %d users %v", n, err)
	}
}

// A draw: entries before the close, one per user; at the close as many
// winners as units in shuffle order, a reserve list after them, everyone
// else LOST at once; an unused win passes to the first on the reserve list.
func TestRoomDraw(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	const pid = 30
	s := open(3)
	s.SaleStart = time.Now().Add(time.Hour)
	k := roomWith(t, rdb, pid, s, lua.RoomSettings{On: true, Window: 200 * time.Millisecond, Mode: lua.ModeDraw, Reserve: 2})
	entries := map[int64]string{}
	for u := int64(1); u <= 10; u++ {
		p := mustTake(t, rdb, pid, u)
		if p.State != lua.PlacePreQueue || p.Mode != lua.ModeDraw {
			t.Fatalf("entry: %+v", p)
		}
		entries[u] = p.Ticket
	}
	if p := mustTake(t, rdb, pid, 4); p.Ticket != entries[4] {
		t.Fatalf("second entry of user 4: %+v", p)
	}
	setStart(t, rdb, pid, time.Now().Add(-time.Second))
	if _, err := take(rdb, pid, 11); !errors.Is(err, lua.ErrDrawClosed) {
		t.Fatalf("entry after the close: %v", err)
	}
	openRoom(t, rdb, pid, lua.ModeDraw)
	st, _ := lua.ReadRoom(ctx, rdb, pid)
	if st.Winners != 3 || st.Cutoff != 5 {
		t.Fatalf("draw: %+v, want 3 winners and cutoff 5", st)
	}
	list, _ := lua.PublishedList(ctx, rdb, pid)
	seed, _ := drop.ParseSeed(st.Seed)
	rank := map[int64]int{}
	for u, tid := range entries {
		rank[u], _ = drop.Position(seed, list, tid)
	}
	res, err := lua.Admit(ctx, rdb, pid, lua.AdmitArgs{Max: 100, MaxElapsed: time.Second, Window: time.Minute, Left: -1, Overbook: 5})
	if err != nil || len(res.Admitted) != 3 { // draws admit every unit at once, whatever the rate, and never overbook
		t.Fatalf("winners' admission: %+v %v", res, err)
	}
	for _, a := range res.Admitted {
		if rank[a.UserID] > 3 {
			t.Fatalf("user %d admitted with rank %d", a.UserID, rank[a.UserID])
		}
	}
	for u := int64(1); u <= 10; u++ {
		p := mustTake(t, rdb, pid, u)
		switch r := rank[u]; {
		case r <= 3 && p.State != lua.PlaceAdmitted:
			t.Fatalf("winner %d (rank %d): %+v", u, r, p)
		case r > 3 && r <= 5 && (p.State != lua.PlaceWaiting || p.Position != int64(r-3)):
			t.Fatalf("reserve %d (rank %d): %+v", u, r, p)
		case r > 5 && p.State != lua.PlaceLost:
			t.Fatalf("loser %d (rank %d): %+v", u, r, p)
		}
	}
	byRank := map[int]int64{}
	for u, r := range rank {
		byRank[r] = u
	}
	if _, err := admitted(rdb, k, "d1", byRank[1]); err != nil { // the first winner orders
		t.Fatal(err)
	}
	if _, err := admitted(rdb, k, "d1b", byRank[1]); !errors.Is(err, lua.ErrNotAdmitted) {
		t.Fatalf("second order of a winner: %v", err)
	}
	time.Sleep(250 * time.Millisecond) // the other two wins pass unused
	res, _ = step(rdb, pid, 0, 100)
	if res.Expired != 2 || len(res.Admitted) != 2 {
		t.Fatalf("after two wins expired: %+v, want both passed to the reserve list", res)
	}
	if p := mustTake(t, rdb, pid, byRank[1]); p.State != lua.PlaceOrdered {
		t.Fatalf("winner who ordered: %+v", p)
	}
	if p := mustTake(t, rdb, pid, byRank[2]); p.State != lua.PlaceExpired {
		t.Fatalf("winner who let it pass: %+v", p)
	}
	if p := mustTake(t, rdb, pid, byRank[4]); p.State != lua.PlaceAdmitted {
		t.Fatalf("first reserve after the pass-on: %+v", p)
	}
	time.Sleep(250 * time.Millisecond)
	res, _ = step(rdb, pid, 0, 100)
	if res.Expired != 2 || len(res.Admitted) != 0 {
		t.Fatalf("the reserve list is used up: %+v, want nobody else admitted", res)
	}
}

// Proof-of-work: a room that asks for it gives no ticket without one, and a
// challenge used once is refused the second time.
func TestRoomProofOfWorkOnce(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	roomWith(t, rdb, 31, open(10), lua.RoomSettings{On: true, Window: time.Minute, PowCost: 1000})
	a := lua.TakeArgs{UserID: 1, TicketID: "0000000000000001"}
	if _, err := lua.Take(ctx, rdb, 31, a); !errors.Is(err, lua.ErrPowRequired) {
		t.Fatalf("take without a proof-of-work: %v", err)
	}
	a.PowChallenge, a.PowTTL = "c0ffee", time.Minute
	if p, err := lua.Take(ctx, rdb, 31, a); err != nil || p.Ticket != a.TicketID {
		t.Fatalf("take with one: %+v %v", p, err)
	}
	if p, err := lua.Take(ctx, rdb, 31, lua.TakeArgs{UserID: 1, TicketID: "0000000000000009"}); err != nil || p.Ticket != a.TicketID {
		t.Fatalf("asking again for the live ticket needs no new proof: %+v %v", p, err)
	}
	b := lua.TakeArgs{UserID: 2, TicketID: "0000000000000002", PowChallenge: "c0ffee", PowTTL: time.Minute}
	if _, err := lua.Take(ctx, rdb, 31, b); !errors.Is(err, lua.ErrPowReused) {
		t.Fatalf("the same challenge a second time: %v", err)
	}
	if ttl, _ := rdb.PTTL(ctx, lua.Room(31).Pow("c0ffee")).Result(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("used-mark TTL %v", ttl)
	}
}

// A sharded product's room, step by step (lua/admission.go): every shard
// refuses an order without a claim; the claim takes the admission once per
// intent; a refused reservation gives it back only after its token was
// revoked on the home shard, and a revoked token reserves nothing; a
// reservation's token is held and its claim is never given back.
func TestRoomShardedClaim(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	const pid = 32
	for sh := range 2 {
		if _, _, err := lua.Load(ctx, rdb, lua.ShardKeys(pid, sh), open(5)); err != nil {
			t.Fatal(err)
		}
	}
	if err := lua.SetRoom(ctx, rdb, pid, lua.RoomSettings{On: true, Window: time.Minute, Shards: 2, Commitment: testSeed.Commitment()}); err != nil {
		t.Fatal(err)
	}
	k1 := lua.ShardKeys(pid, 1)
	args := lua.ReserveArgs{OrderNo: "s1", UserID: 1, RequestID: "r1", Quantity: 1, TTL: time.Hour}
	for sh := range 2 {
		if _, err := lua.Reserve(ctx, rdb, lua.ShardKeys(pid, sh), args); !errors.Is(err, lua.ErrRoomOn) {
			t.Fatalf("shard %d without a claim: %v", sh, err)
		}
	}
	const tok1, tok2, tok3 = "00000000000000a1", "00000000000000a2", "00000000000000a3"
	if c, err := lua.ClaimAdmission(ctx, rdb, pid, 1, "r1", tok1); c.Code != lua.ClaimNotAdmitted || err != nil {
		t.Fatalf("claim before admission: %+v %v", c, err)
	}
	mustTake(t, rdb, pid, 1)
	mustTake(t, rdb, pid, 2)
	res, err := lua.Admit(ctx, rdb, pid, lua.AdmitArgs{Rate: 0, Max: 1, MaxElapsed: time.Second, Window: time.Minute, Left: 10})
	if err != nil || res.Code != lua.AdmitShuffle {
		t.Fatalf("first step: %+v %v", res, err)
	}
	if _, err := lua.ShuffleRoom(ctx, rdb, pid, lua.ModeFIFO, testSeed, 10); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	res, _ = lua.Admit(ctx, rdb, pid, lua.AdmitArgs{Rate: 1000, Max: 10, MaxElapsed: time.Second, Window: time.Minute, Left: 1})
	if len(res.Admitted) != 1 || res.Admitted[0].UserID != 1 {
		t.Fatalf("one unit left in all shards: %+v, want only user 1 admitted", res)
	}
	if c, err := lua.ClaimAdmission(ctx, rdb, pid, 1, "r1", tok1); c.Code != lua.ClaimTaken || c.Token != tok1 || c.Used || err != nil {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if c, _ := lua.ClaimAdmission(ctx, rdb, pid, 1, "r1", tok2); c.Code != lua.ClaimTaken || c.Token != tok1 {
		t.Fatalf("the same intent claims again (a retry): %+v, want its own token", c)
	}
	if c, _ := lua.ClaimAdmission(ctx, rdb, pid, 1, "r2", tok2); c.Code != lua.ClaimOtherPending || c.Token != tok1 || c.RequestID != "r1" {
		t.Fatalf("another intent while r1's claim is pending: %+v, want it told to settle r1's first", c)
	}
	// The home shard refuses: the token is revoked there (nothing held),
	// then the admission is given back; the revoked token reserves nothing.
	rdb.HSet(ctx, k1.Stock(), "available", 0)
	args.Claim = tok1
	if _, err := lua.Reserve(ctx, rdb, k1, args); !errors.Is(err, lua.ErrSoldOut) {
		t.Fatalf("reserve on a dry shard: %v", err)
	}
	if held, _, err := lua.RevokeHold(ctx, rdb, k1, 1, tok1, time.Hour); held || err != nil {
		t.Fatalf("revoke: %v %v", held, err)
	}
	rdb.HSet(ctx, k1.Stock(), "available", 5)
	if _, err := lua.Reserve(ctx, rdb, k1, args); !errors.Is(err, lua.ErrClaimRevoked) {
		t.Fatalf("reserve under a revoked token: %v", err)
	}
	if ok, err := lua.GiveClaimBack(ctx, rdb, pid, 1, tok1); !ok || err != nil {
		t.Fatalf("give back: %v %v", ok, err)
	}
	if ok, _ := lua.GiveClaimBack(ctx, rdb, pid, 1, tok1); ok {
		t.Fatal("a second give-back of the same claim")
	}
	if p := mustTake(t, rdb, pid, 1); p.State != lua.PlaceAdmitted {
		t.Fatalf("after the give-back: %+v, want ADMITTED again", p)
	}
	if c, _ := lua.ClaimAdmission(ctx, rdb, pid, 1, "r3", tok3); c.Code != lua.ClaimTaken || c.Token != tok3 {
		t.Fatalf("claim after the give-back: %+v", c)
	}
	args.RequestID, args.Claim = "r3", tok3
	if _, err := lua.Reserve(ctx, rdb, k1, args); err != nil {
		t.Fatalf("reserve with the claim: %v", err)
	}
	if held, rid, _ := lua.RevokeHold(ctx, rdb, k1, 1, tok3, time.Hour); !held || rid != "r3" {
		t.Fatalf("revoke after a reservation: %v %q, want held by r3", held, rid)
	}
	args.RequestID = "r4" // the token bought r3: another intent under it reserves nothing
	if _, err := lua.Reserve(ctx, rdb, k1, args); !errors.Is(err, lua.ErrNotAdmitted) {
		t.Fatalf("another intent under a used token: %v", err)
	}
	if ok, err := lua.MarkClaimUsed(ctx, rdb, pid, 1, tok3); !ok || err != nil {
		t.Fatalf("mark used: %v %v", ok, err)
	}
	if ok, _ := lua.GiveClaimBack(ctx, rdb, pid, 1, tok3); ok {
		t.Fatal("a used claim was given back")
	}
	if c, _ := lua.ClaimAdmission(ctx, rdb, pid, 1, "r4", tok2); c.Code != lua.ClaimNotAdmitted {
		t.Fatalf("another intent after the used claim: %+v", c)
	}
	if st, _ := lua.ReadRoom(ctx, rdb, pid); !st.Sharded || st.Claimed != 1 || st.Used != 1 || st.Live != 0 {
		t.Fatalf("room after the claimed order: %+v", st)
	}
	if n, _ := rdb.HGet(ctx, k1.Stock(), "room").Result(); n != "2" {
		t.Fatalf("shard 1 room flag %q", n)
	}
}
