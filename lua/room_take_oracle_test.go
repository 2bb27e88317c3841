package lua

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua/luatest"
)

// testdata/room_take_single.lua is room_take.lua as it was before it took
// batches (one request a call, git 45ce930): the oracle of
// TestRoomTakeBatchAgreesWithSingleScript. Changes of what a request is
// answered go into both scripts (since: a paused sale answers rate 0; an
// ended sale answers a place or a live admission NOT_ACTIVE; a user who
// holds the per-user limit gets no new ticket, LIMIT).
//
//go:embed testdata/room_take_single.lua
var singleTakeSrc string

var singleTake = redis.NewScript(singleTakeSrc)

// One room_take.lua run over a batch of requests answers each as the
// pre-batch script answered it, called once per request in the same order,
// and leaves every key of the room as that did. 2,000 random rooms (an
// outside review's generator): fifo, random and draw; before the pre-queue
// opens, pre-queued, closing in this very call, open, ended; one-shard and
// sharded stock, sold out; shuffled or not; a draw's cutoff; live and
// expired admissions; proof-of-work on with new, repeated and used
// challenges; ticket ids colliding with pre-queued ones; malformed
// records; fractional and infinite upto and rate; 1 to 14 requests with
// repeated users. The issue times (the
// Redis clock) are the only thing masked.
func TestRoomTakeBatchAgreesWithSingleScript(t *testing.T) {
	rdb := luatest.New(t, luatest.DBLua)
	ctx := context.Background()
	const single, batched = int64(900001), int64(900002)
	fails := 0
	for it := range 2000 {
		rng := rand.New(rand.NewPCG(uint64(it), 99))
		tm, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		s, calls := oracleRoom(rng, tm.UnixMilli())
		for _, pid := range []int64{single, batched} {
			oracleWipe(ctx, rdb, pid)
			s.load(ctx, t, rdb, pid)
		}
		before := oracleDump(ctx, rdb, single)
		var want []string
		for _, a := range calls {
			want = append(want, oracleShow(singleRun(ctx, rdb, single, a)))
		}
		batch := make([]TakeCall, len(calls))
		for i, a := range calls {
			batch[i] = TakeCall{ProductID: batched, Args: a}
		}
		TakeMany(ctx, rdb, batch)
		var msg strings.Builder
		for i := range calls {
			if got := oracleShow(batch[i].Place, batch[i].Err); got != want[i] {
				fmt.Fprintf(&msg, "  call %d %+v:\n    single %s\n    batch  %s\n", i, calls[i], want[i], got)
			}
		}
		if ds, db := oracleDump(ctx, rdb, single), oracleDump(ctx, rdb, batched); ds != db {
			fmt.Fprintf(&msg, "  state after single calls:\n%s  after the batch:\n%s", ds, db)
		}
		if msg.Len() > 0 {
			if fails++; fails <= 3 {
				t.Errorf("room %d, before:\n%s%s", it, before, msg.String())
			}
		}
	}
	if fails > 0 {
		t.Fatalf("%d of 2000 rooms differ", fails)
	}
}

// singleRun is one request through the pre-batch script.
func singleRun(ctx context.Context, rdb *redis.Client, pid int64, a TakeArgs) (Place, error) {
	r := Room(pid)
	k := a.PowChallenge
	if k == "" {
		k = "-"
	}
	keys := []string{r.Stock(), r.State(), r.Line(), r.Tickets(), r.Admitted(), r.Pre(), r.Fresh(), r.Pow(k),
		ShardKeys(pid, 0).User(a.UserID)}
	check := "0"
	if a.CheckLimit {
		check = "1"
	}
	res, err := singleTake.Run(ctx, rdb, keys, a.UserID, a.TicketID, a.PowChallenge, max(a.PowTTL.Milliseconds(), 1), check).Slice()
	if err != nil {
		return Place{}, fmt.Errorf("lua: room take: %w", scriptFault(err, r.base))
	}
	return singleReply(res)
}

// singleReply maps the pre-batch script's answer, ten values: code,
// ticketId, position, deadlineMs, rateMilli, issuedMs, mode,
// shufflePosition, startMs, waiting.
func singleReply(res []any) (Place, error) {
	if len(res) != 10 {
		return Place{}, fmt.Errorf("lua: room take: unexpected result %v", res)
	}
	var n [10]int64
	for _, i := range []int{0, 2, 3, 4, 5, 7, 8, 9} {
		v, ok := res[i].(int64)
		if !ok {
			return Place{}, fmt.Errorf("lua: room take: unexpected result %v", res)
		}
		n[i] = v
	}
	tid, _ := res[1].(string)
	mode, _ := res[6].(string)
	return takeReply{code: n[0], tid: tid, pos: n[2], dl: n[3], rateMilli: n[4], at: n[5], mode: mode,
		spos: n[7], opens: n[8], waiting: n[9]}.place()
}

// oracleState is a room's keys by suffix of the room's base key.
type oracleState struct {
	hashes map[string]map[string]string
	zsets  map[string]map[string]float64
	strs   map[string]string
}

func (s oracleState) load(ctx context.Context, t *testing.T, rdb *redis.Client, pid int64) {
	base := Room(pid).base
	for k, h := range s.hashes {
		for f, v := range h {
			if err := rdb.HSet(ctx, base+k, f, v).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for k, z := range s.zsets {
		for m, sc := range z {
			if err := rdb.ZAdd(ctx, base+k, redis.Z{Score: sc, Member: m}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for k, v := range s.strs {
		if err := rdb.Set(ctx, base+k, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func oracleWipe(ctx context.Context, rdb *redis.Client, pid int64) {
	if keys, _ := rdb.Keys(ctx, Room(pid).base+"*").Result(); len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}

// oracleDump is every key of the room, the issue times in the tickets'
// records masked.
func oracleDump(ctx context.Context, rdb *redis.Client, pid int64) string {
	base := Room(pid).base
	keys, _ := rdb.Keys(ctx, base+"*").Result()
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		suf := strings.TrimPrefix(k, base)
		switch typ, _ := rdb.Type(ctx, k).Result(); typ {
		case "hash":
			h, _ := rdb.HGetAll(ctx, k).Result()
			var fs []string
			for f, v := range h {
				if p := strings.SplitN(v, " ", 3); suf == "room:tickets" && len(p) == 3 {
					if n, err := strconv.ParseInt(p[1], 10, 64); err == nil && n > 1e12 {
						p[1] = "NOW"
					}
					v = strings.Join(p, " ")
				}
				fs = append(fs, f+"="+strconv.Quote(v))
			}
			slices.Sort(fs)
			fmt.Fprintln(&b, suf, fs)
		case "zset":
			z, _ := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
			fmt.Fprintln(&b, suf, z)
		case "string":
			v, _ := rdb.Get(ctx, k).Result()
			fmt.Fprintln(&b, suf, v)
		default:
			fmt.Fprintln(&b, suf, typ)
		}
	}
	return b.String()
}

func oracleShow(p Place, err error) string {
	if p.IssuedAt.UnixMilli() > 1e12 { // the Redis clock of the call
		p.IssuedAt = time.Time{}
	}
	return fmt.Sprintf("%+v %v", p, err)
}

// oracleRoom is a random room around now (Redis clock, ms) and 1 to 14
// requests for it.
func oracleRoom(rng *rand.Rand, now int64) (oracleState, []TakeArgs) {
	s := oracleState{hashes: map[string]map[string]string{"stock": {}, "room": {}, "room:tickets": {}, "room:pre": {}, "room:fresh": {}},
		zsets: map[string]map[string]float64{"room:line": {}, "room:adm": {}}, strs: map[string]string{}}
	st, rm := s.hashes["stock"], s.hashes["room"]
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }
	if rng.IntN(20) > 0 { // else no stock hash: NOT_FOUND
		st["available"] = pick("0", "5", "5", "5")
	}
	st["room"] = pick("1", "1", "2", "0")
	if rng.IntN(4) == 0 {
		st["paused"] = "1"
	}
	st["start"], st["end"] = fmt.Sprint(now-1000), fmt.Sprint(now+7_200_000)
	switch rng.IntN(6) {
	case 0: // before the opening
		st["start"] = fmt.Sprint(now + 3_600_000)
		if rng.IntN(3) == 0 {
			rm["pqms"] = pick("1000", "10000000")
		}
	case 1: // the opening passed, not closed yet: this call closes it
	case 2, 3, 4:
		rm["closed"] = "1"
	case 5: // ended (before the opening: an admin ended it during the pre-queue)
		st["start"], st["end"] = fmt.Sprint(now-10_000), fmt.Sprint(now-1000)
		if rng.IntN(3) == 0 {
			st["start"] = fmt.Sprint(now + 3_600_000)
		}
		if rng.IntN(2) == 0 {
			rm["closed"] = "1"
		}
	}
	rm["mode"] = pick("fifo", "random", "draw")
	if rng.IntN(2) == 0 {
		rm["shuffled"] = "1"
	}
	rm["issued"], rm["pre"], rm["upto"], rm["cutoff"] = fmt.Sprint(rng.IntN(10)), fmt.Sprint(rng.IntN(4)), fmt.Sprint(rng.IntN(8)), fmt.Sprint(rng.IntN(10))
	rm["rate"] = "1500"
	if rng.IntN(10) == 0 { // not written so by room_admit.lua, but read as numbers: answered as before
		rm["upto"], rm["rate"] = pick("2.5", "-inf", "1e300"), pick("1500.5", "-0.5")
	}
	if rng.IntN(2) == 0 {
		rm["base"] = fmt.Sprint(rng.IntN(3))
	}
	if rng.IntN(3) == 0 {
		rm["pow"] = "5"
	}
	if rng.IntN(2) == 0 {
		rm["left"] = fmt.Sprint(rng.IntN(3))
	}
	if rng.IntN(2) == 0 {
		rm["expired"], rm["owed"] = "1", "2"
	}
	tids := []string{"00000000000000a1", "00000000000000a2", "00000000000000a3", "00000000000000a4", "00000000000000a5", "00000000000000a6"}
	for u := 1; u <= 6; u++ {
		us, tid := fmt.Sprint(u), tids[rng.IntN(len(tids))]
		switch rng.IntN(9) {
		case 2:
			s.hashes["room:tickets"][us] = fmt.Sprintf("%d 100 %s ", rng.IntN(10), tid)
		case 3:
			s.hashes["room:tickets"][us] = fmt.Sprintf("%d 100 %s p", rng.IntN(10), tid)
		case 4:
			s.hashes["room:tickets"][us] = fmt.Sprintf("%d 100 %s x", rng.IntN(10), tid)
		case 5:
			s.hashes["room:tickets"][us] = fmt.Sprintf("0 100 %s p", tid)
		case 6:
			s.hashes["room:tickets"][us] = pick("garbage", "3 100 zz", "3 100 ab px extra", "", "3 100 ab")
		case 7:
			s.hashes["room:tickets"][us] = fmt.Sprintf("%d 100 %s px", rng.IntN(10), tid)
		case 8:
			s.hashes["room:tickets"][us] = fmt.Sprintf("0 100 %s ", tid)
		}
		if rng.IntN(3) == 0 { // an admission, live or past its deadline
			d := now + 600_000
			if rng.IntN(2) == 0 {
				d = now - 500
			}
			s.zsets["room:adm"][us] = float64(d)
		}
		if rng.IntN(4) == 0 {
			s.zsets["room:line"][us] = float64(rng.IntN(10))
		}
		if rng.IntN(5) == 0 {
			s.hashes["room:fresh"][us] = tids[rng.IntN(len(tids))]
		}
	}
	for _, tid := range tids {
		if rng.IntN(4) == 0 {
			s.hashes["room:pre"][tid] = fmt.Sprint(1 + rng.IntN(6))
		}
	}
	if rng.IntN(3) == 0 {
		s.strs["room:pow:c1"] = "9" // a challenge used before
	}
	st["limit"] = pick("0", "0", "1", "2")
	for u := 1; u <= 7; u++ { // units held (reserve.lua's per-user count)
		if rng.IntN(3) == 0 {
			s.strs[fmt.Sprintf("user:%d", u)] = fmt.Sprint(rng.IntN(3))
		}
	}
	calls := make([]TakeArgs, 1+rng.IntN(14))
	for i := range calls {
		calls[i] = TakeArgs{UserID: int64(1 + rng.IntN(7)), TicketID: tids[rng.IntN(len(tids))], CheckLimit: rng.IntN(3) > 0}
		if rng.IntN(3) == 0 {
			calls[i].TicketID = fmt.Sprintf("%016x", 0xb000+rng.IntN(1000))
		}
		if rng.IntN(2) == 0 {
			calls[i].PowChallenge, calls[i].PowTTL = fmt.Sprintf("c%d", 1+rng.IntN(3)), time.Minute
		}
	}
	return s, calls
}

// TestTakeDecode: the short answers of new tickets decode as the full
// form would, and a reply not of room_take.lua's shape fails every call
// of the run rather than answering some.
func TestTakeDecode(t *testing.T) {
	header := []any{int64(2500), "fifo", int64(1_700_000_000_000), int64(1_700_000_000_123)}
	calls := func() []*TakeCall {
		return []*TakeCall{
			{ProductID: 7, Args: TakeArgs{UserID: 1, TicketID: "00000000000000a1"}},
			{ProductID: 7, Args: TakeArgs{UserID: 2, TicketID: "00000000000000a2"}},
			{ProductID: 7, Args: TakeArgs{UserID: 3, TicketID: "00000000000000a3"}},
			{ProductID: 7, Args: TakeArgs{UserID: 4, TicketID: "00000000000000a4"}},
		}
	}
	show := func(p Place, err error) string { return fmt.Sprintf("%+v %v", p, err) }
	cs := calls()
	full := []any{int64(1), "00000000000000ff", int64(0), int64(1_700_000_009_000), int64(1_699_999_999_000),
		int64(3), int64(0), int64(1_700_000_000_000)}
	takeAnswers(cs, append(header, int64(42), int64(0), int64(-1), full), nil)
	opens := time.UnixMilli(1_700_000_000_000).UTC()
	now := time.UnixMilli(1_700_000_000_123).UTC()
	want := []string{
		show(Place{Ticket: "00000000000000a1", State: PlaceWaiting, Mode: ModeFIFO, Position: 42, Rate: 2.5, IssuedAt: now, OpensAt: opens}, nil),
		show(Place{Ticket: "00000000000000a2", State: PlacePreQueue, Mode: ModeFIFO, Rate: 2.5, IssuedAt: now, OpensAt: opens}, nil),
		show(Place{Mode: ModeFIFO, Rate: 2.5, OpensAt: opens}, ErrSoldOut),
		show(Place{Ticket: "00000000000000ff", State: PlaceAdmitted, Mode: ModeFIFO, Rate: 2.5, ShufflePosition: 3,
			Deadline: time.UnixMilli(1_700_000_009_000).UTC(), IssuedAt: time.UnixMilli(1_699_999_999_000).UTC(), OpensAt: opens}, nil),
	}
	for i, c := range cs {
		if got := show(c.Place, c.Err); got != want[i] {
			t.Errorf("answer %d:\n got  %s\n want %s", i, got, want[i])
		}
	}
	for name, reply := range map[string]any{
		"an answer short":      append(header[:4:4], int64(1), int64(2), int64(3)),
		"an unknown integer":   append(header[:4:4], int64(1), int64(2), int64(-2), int64(4)),
		"a full answer short":  append(header[:4:4], int64(1), int64(2), int64(3), full[:7]),
		"a non-integer in one": append(header[:4:4], int64(1), int64(2), int64(3), append([]any{"1"}, full[1:]...)),
		"no header":            []any{int64(1), int64(2), int64(3), int64(4)},
		"not an array":         "OK",
	} {
		cs := calls()
		takeAnswers(cs, reply, nil)
		for i, c := range cs {
			if c.Err == nil || errors.Is(c.Err, ErrSoldOut) || !strings.HasPrefix(c.Err.Error(), "lua: room take: ") {
				t.Errorf("%s: call %d answered %+v, %v; want the run's error", name, i, c.Place, c.Err)
			}
		}
	}
}
