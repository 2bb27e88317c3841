package lua_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
)

// One room_take.lua run answers a batch of calls as the same calls taken
// one after another would, and leaves the room in the same state: two
// identical rooms, one fed call by call (Take), the other in batches of
// random sizes (TakeMany, several products mixed in a batch), from a
// sequence with repeated users, repeated proof-of-work challenges and a
// ticket id that a pre-queued ticket already has. Every answer but the
// issue time, and the rooms' tickets, line, pre-queue and counters, must
// be equal.
func TestRoomTakeBatchEqualsOneByOne(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	cases := []struct {
		name  string
		pre   bool // before the opening: the pre-queue
		avail int64
		rs    lua.RoomSettings
		// admit, after users 1…60 took tickets: admissions of a minute
		// for the first 10 in line, of 50 ms (expired when the calls come)
		// for the next 20.
		admit bool
	}{
		{name: "fifo after the opening", avail: 100, rs: lua.RoomSettings{On: true, Window: time.Minute}},
		{name: "fifo pre-queue", pre: true, avail: 100, rs: lua.RoomSettings{On: true, Window: time.Minute}},
		{name: "fifo with admissions", avail: 100, admit: true, rs: lua.RoomSettings{On: true, Window: time.Minute}},
		{name: "draw with wins", avail: 100, admit: true, rs: lua.RoomSettings{On: true, Window: time.Minute, Mode: lua.ModeDraw, Reserve: 10}},
		{name: "random", avail: 100, rs: lua.RoomSettings{On: true, Window: time.Minute, Mode: lua.ModeRandom}},
		{name: "random pre-queue", pre: true, avail: 100, rs: lua.RoomSettings{On: true, Window: time.Minute, Mode: lua.ModeRandom}},
		{name: "draw entries", pre: true, avail: 100, rs: lua.RoomSettings{On: true, Window: time.Minute, Mode: lua.ModeDraw}},
		{name: "draw closed", avail: 100, rs: lua.RoomSettings{On: true, Window: time.Minute, Mode: lua.ModeDraw}},
		{name: "sold out", avail: 0, rs: lua.RoomSettings{On: true, Window: time.Minute}},
		{name: "proof-of-work", avail: 100, rs: lua.RoomSettings{On: true, Window: time.Minute, PowCost: 1000}},
		{name: "proof-of-work pre-queue", pre: true, avail: 100, rs: lua.RoomSettings{On: true, Window: time.Minute, PowCost: 1000}},
	}
	start := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			one, many, other := int64(100+3*ci), int64(101+3*ci), int64(102+3*ci)
			for _, pid := range []int64{one, many, other} {
				s := open(tc.avail)
				s.SaleStart = start
				if tc.pre || tc.admit && tc.rs.Mode == lua.ModeDraw {
					s.SaleStart = start.Add(2 * time.Hour)
				}
				roomWith(t, rdb, pid, s, tc.rs)
			}
			if tc.admit {
				for _, pid := range []int64{one, many} {
					for u := int64(1); u <= 60; u++ {
						mustTake(t, rdb, pid, u)
					}
					if tc.rs.Mode == lua.ModeDraw {
						setStart(t, rdb, pid, start)
					}
					openRoom(t, rdb, pid, tc.rs.Mode)
					for _, a := range []struct {
						n      int
						window time.Duration
					}{{10, time.Minute}, {20, 50 * time.Millisecond}} {
						time.Sleep(20 * time.Millisecond) // a pacer step admits by the time since the last
						if err := rdb.HSet(ctx, lua.Room(pid).State(), "window", a.window.Milliseconds()).Err(); err != nil {
							t.Fatal(err)
						}
						res, err := lua.Admit(ctx, rdb, pid, lua.AdmitArgs{Rate: 1e6, Max: a.n, MaxElapsed: time.Second, Window: a.window, Left: -1})
						if err != nil || len(res.Admitted) != a.n {
							t.Fatalf("admit %d: %+v %v", a.n, res, err)
						}
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			var seq []lua.TakeArgs
			for i := range 400 {
				a := lua.TakeArgs{UserID: 1 + rng.Int64N(150), TicketID: fmt.Sprintf("%016x", 0x5000+i)}
				if i > 20 && rng.IntN(10) == 0 { // another call's ticket id: RETRY when that one was pre-queued
					a.TicketID = seq[rng.IntN(i)].TicketID
				}
				if rng.IntN(4) > 0 {
					a.PowChallenge, a.PowTTL = fmt.Sprintf("c%d", rng.IntN(300)), time.Minute
				}
				seq = append(seq, a)
			}
			var want, got []lua.TakeCall
			for _, a := range seq {
				p, err := lua.Take(ctx, rdb, one, a)
				want = append(want, lua.TakeCall{ProductID: one, Args: a, Place: p, Err: err})
			}
			for len(got) < len(seq) {
				n := min(1+rng.IntN(40), len(seq)-len(got))
				var batch []lua.TakeCall
				for _, a := range seq[len(got) : len(got)+n] {
					batch = append(batch, lua.TakeCall{ProductID: many, Args: a})
					if rng.IntN(3) == 0 { // another product's call in the same pipeline
						batch = append(batch, lua.TakeCall{ProductID: other, Args: a})
					}
				}
				lua.TakeMany(ctx, rdb, batch)
				for _, c := range batch {
					if c.ProductID == many {
						got = append(got, c)
					}
				}
			}
			if tc.admit {
				for _, st := range []lua.PlaceState{lua.PlaceAdmitted, expiredState(tc.rs.Mode)} {
					if !slices.ContainsFunc(got, func(c lua.TakeCall) bool { return c.Place.State == st }) {
						t.Fatalf("no call answered %s", st)
					}
				}
			}
			codes := map[string]int{}
			for i := range seq {
				w, g := want[i], got[i]
				// The rooms gave their tickets and admissions at other instants.
				w.Place.IssuedAt, g.Place.IssuedAt = time.Time{}, time.Time{}
				if w.Place.Deadline.IsZero() != g.Place.Deadline.IsZero() {
					t.Fatalf("call %d: deadlines %v and %v", i, w.Place.Deadline, g.Place.Deadline)
				}
				w.Place.Deadline, g.Place.Deadline = time.Time{}, time.Time{}
				if fmt.Sprint(w.Place, w.Err) != fmt.Sprint(g.Place, g.Err) {
					t.Fatalf("call %d %+v: one by one %+v %v, in a batch %+v %v", i, seq[i], w.Place, w.Err, g.Place, g.Err)
				}
				codes[fmt.Sprint(g.Place.State, " ", g.Err)]++
			}
			if ws, gs := roomState(t, rdb, one), roomState(t, rdb, many); ws != gs {
				t.Fatalf("room state one by one:\n%s\nin batches:\n%s", ws, gs)
			}
			t.Logf("answers: %v", codes)
		})
	}
}

// roomState is what room_take.lua writes in a room, with the times cut off
// the tickets' records.
func roomState(t *testing.T, rdb *redis.Client, pid int64) string {
	t.Helper()
	ctx := context.Background()
	r := lua.Room(pid)
	var b strings.Builder
	tickets, err := rdb.HGetAll(ctx, r.Tickets()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var recs []string
	for u, rec := range tickets {
		f := strings.Fields(rec)
		f[1] = "-"
		recs = append(recs, u+"="+strings.Join(f, " "))
	}
	slices.Sort(recs)
	fmt.Fprintln(&b, "tickets", recs)
	line, _ := rdb.ZRangeWithScores(ctx, r.Line(), 0, -1).Result()
	fmt.Fprintln(&b, "line", line)
	pre, _ := rdb.HGetAll(ctx, r.Pre()).Result()
	fmt.Fprintln(&b, "pre", len(pre), pre)
	fresh, _ := rdb.HGetAll(ctx, r.Fresh()).Result()
	fmt.Fprintln(&b, "fresh", len(fresh), fresh)
	st, _ := rdb.HMGet(ctx, r.State(), "issued", "pre", "closed", "base", "expired", "owed").Result()
	fmt.Fprintln(&b, "state", st)
	return b.String()
}

// expiredState is what a buyer whose admission expired is answered: a
// draw's win is passed on (EXPIRED); in line, the buyer gets a new ticket.
func expiredState(m lua.RoomMode) lua.PlaceState {
	if m == lua.ModeDraw {
		return lua.PlaceExpired
	}
	return lua.PlaceWaiting
}

// loadBetween is a go-redis hook that sends SCRIPT LOAD of script after the
// first command of every pipeline: the first run of the pipeline is refused
// (NOSCRIPT), the later ones run — another client's SCRIPT LOAD arriving
// mid-pipeline, made certain.
type loadBetween struct{ script string }

func (loadBetween) DialHook(next redis.DialHook) redis.DialHook { return next }
func (loadBetween) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h loadBetween) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 1 {
			load := redis.NewStringCmd(ctx, "script", "load", h.script)
			cmds = append([]redis.Cmder{cmds[0], load}, cmds[1:]...)
		}
		return next(ctx, cmds)
	}
}

// A product with more calls than one run takes (takeBatchMax, 256) is run
// in pipelines one after another: when its first run is refused for a
// missing script and the script is loaded before its second run, the
// first run is still answered first — the line follows the calls' order
// and a user's repeated call is answered the ticket of the first. (When
// both runs went in one pipeline, the refused first run ran again after
// the second: the second run's buyers were put ahead.)
func TestRoomTakeRunsOfOneProductKeepTheirOrder(t *testing.T) {
	rdb := luatest.Private(t)
	ctx := context.Background()
	p, q := int64(1), int64(2)
	for _, pid := range []int64{p, q} {
		roomWith(t, rdb, pid, open(1000), lua.RoomSettings{On: true, Window: time.Minute})
		openRoom(t, rdb, pid, lua.ModeFIFO)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(loadBetween{script: lua.RoomTakeSource()})
	var calls []lua.TakeCall
	for u := int64(1); u <= 300; u++ {
		calls = append(calls, lua.TakeCall{ProductID: p, Args: lua.TakeArgs{UserID: u, TicketID: fmt.Sprintf("%016x", u)}})
		if u%100 == 0 {
			calls = append(calls, lua.TakeCall{ProductID: q, Args: lua.TakeArgs{UserID: u, TicketID: fmt.Sprintf("%016x", 1000+u)}})
		}
	}
	again := lua.TakeCall{ProductID: p, Args: lua.TakeArgs{UserID: 7, TicketID: fmt.Sprintf("%016x", 7000)}}
	calls = append(calls, again) // past the first run of p: in its second
	lua.TakeMany(ctx, rdb, calls)
	var last int64
	byUser := map[int64]string{}
	for i, c := range calls {
		if c.Err != nil || c.Place.State != lua.PlaceWaiting {
			t.Fatalf("call %d (product %d, user %d): %+v %v", i, c.ProductID, c.Args.UserID, c.Place, c.Err)
		}
		if c.ProductID != p {
			continue
		}
		if tid, ok := byUser[c.Args.UserID]; ok {
			if c.Place.Ticket != tid || c.Place.Position != 7 {
				t.Errorf("user 7 again: ticket %s at %d, want the first call's %s at 7", c.Place.Ticket, c.Place.Position, tid)
			}
			continue
		}
		byUser[c.Args.UserID] = c.Place.Ticket
		if c.Place.Position != last+1 {
			t.Fatalf("call %d (user %d) is at position %d after %d: the line is not in the calls' order", i, c.Args.UserID, c.Place.Position, last)
		}
		last = c.Place.Position
	}
	if last != 300 {
		t.Errorf("last position %d, want 300", last)
	}
}
