package lua_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
	"github.com/stampede-sh/stampede/order"
)

// The model of a waiting room's protocol (docs/spec.md §5.8, docs/waiting-room.md
// "One admission, one order"): rapid draws sequences of what the world does
// to one product's room — tickets, the opening, pacer steps, orders with
// new and reused requestIds and changed quantities, retries, Redis errors
// injected into a chosen script call (before it runs, or after it ran with
// its reply lost), cancels (releases), admissions expiring and pending
// claims lapsing — on a 1- or 3-shard product in fifo, random or draw mode,
// against real Redis, and after every action compares Redis with what must
// be true:
//
//   - per buyer: reservations + admissions still usable ≤ admissions
//     granted (one admission, a draw's win, leads to at most one order);
//   - per (buyer, requestId): at most one reservation, and a retry answers
//     it (DUPLICATE with its orderNo);
//   - units: Σ available + Σ unreleased reservations = total, none < 0;
//   - the room's counters: admitted = live + expired + claimed (one shard:
//     + the reservations, which use their admission in the script) and
//     claimed = claims pending + used + lapsed;
//   - after an order without a fault: a 202 used the admission, a refusal
//     kept it (NOT_ADMITTED exactly when there was none), and no claim of
//     the buyer is left pending.

var plantOldGiveBack = flag.Bool("admission.plant-old", false,
	"admission model: run the sharded order path as it was before lua.AdmissionSaga (a refused reservation, "+
		"IDEMPOTENCY_KEY_REUSED included, gave the claim back) instead of the saga; the model must fail")

// admissionChecks is the model's number of runs when -rapid.checks is not
// given (about 30 s on a 2-core machine shared with other tests); a longer
// run: go test ./lua -run TestAdmissionModel -rapid.checks=2000.
const admissionChecks, admissionSteps = "700", "100"

func TestAdmissionModel(t *testing.T) {
	if !flagGiven("rapid.checks") {
		old := flag.Lookup("rapid.checks").Value.String()
		if err := flag.Set("rapid.checks", admissionChecks); err != nil {
			t.Fatal(err)
		}
		defer flag.Set("rapid.checks", old)
	}
	rdb := luatest.New(t, luatest.DBLua)
	if !flagGiven("rapid.steps") {
		old := flag.Lookup("rapid.steps").Value.String()
		if err := flag.Set("rapid.steps", admissionSteps); err != nil {
			t.Fatal(err)
		}
		defer flag.Set("rapid.steps", old)
	}
	if err := lua.LoadAll(context.Background(), rdb); err != nil {
		t.Fatal(err)
	}
	var pid int64 = 9000
	var steps, orders int
	rapid.Check(t, func(rt *rapid.T) {
		pid++
		m := newRoomModel(rt, rdb, pid)
		rt.Repeat(m.actions())
		steps += m.steps
		orders += m.orders
	})
	t.Logf("%d runs: %d actions, %d orders", pid-9000, steps, orders)
}

func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// errInjected is the Redis error a faultScripter reports.
var errInjected = errors.New("injected: connection reset")

// faultScripter is a Redis client whose n-th script call of an armed
// action fails: before it runs (nothing happened) or after it ran (the
// reply is lost: the caller cannot tell).
type faultScripter struct {
	redis.Scripter
	names map[string]string

	mu    sync.Mutex
	calls int
	at    int  // call to fail, 1-based; 0: none
	after bool // run it first
	fired string
}

func (f *faultScripter) arm(at int, after bool) {
	f.mu.Lock()
	f.calls, f.at, f.after, f.fired = 0, at, after, ""
	f.mu.Unlock()
}

// disarm returns the script whose call failed ("" if none did).
func (f *faultScripter) disarm() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = 0
	return f.fired
}

func (f *faultScripter) hit(sha string) (fail, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.at == 0 || f.calls != f.at {
		return false, false
	}
	f.fired = f.names[sha]
	if f.after {
		f.fired += " (after it ran)"
	}
	return true, f.after
}

func (f *faultScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	fail, after := f.hit(sha)
	if !fail {
		return f.Scripter.EvalSha(ctx, sha, keys, args...)
	}
	if after {
		f.Scripter.EvalSha(ctx, sha, keys, args...)
	}
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errInjected)
	return cmd
}

// roomModel is one product's room and what the model knows of it.
type roomModel struct {
	rdb    *redis.Client
	fault  *faultScripter
	stock  *lua.Sharded
	saga   *lua.AdmissionSaga
	pid    int64
	shards int
	mode   lua.RoomMode
	total  int64
	maxq   int64
	users  []int64

	opened   bool
	granted  map[int64]int       // admissions (a draw: wins) granted per buyer, from the pacer's answers
	released map[string]bool     // orderNos released
	lapsed   int64               // pending claims whose key the model dropped (their TTL passed)
	last     map[int64]orderCall // each buyer's last order
	gen      *order.NoGenerator
	seq      int
	tokens   atomic.Int64
	steps    int // actions checked
	orders   int // orders placed
}

type orderCall struct {
	rid string
	qty int64
}

func newRoomModel(t *rapid.T, rdb *redis.Client, pid int64) *roomModel {
	ctx := context.Background()
	m := &roomModel{rdb: rdb, pid: pid, users: []int64{1, 2, 3, 4},
		granted: map[int64]int{}, released: map[string]bool{}, last: map[int64]orderCall{}}
	gen, err := order.NewNoGenerator(1)
	if err != nil {
		t.Fatal(err)
	}
	m.gen = gen
	m.shards = rapid.SampledFrom([]int{1, 3}).Draw(t, "shards")
	m.mode = rapid.SampledFrom([]lua.RoomMode{lua.ModeFIFO, lua.ModeRandom, lua.ModeDraw}).Draw(t, "mode")
	m.total = rapid.Int64Range(int64(m.shards), 6).Draw(t, "stock")
	m.maxq = rapid.Int64Range(1, 3).Draw(t, "maxPerOrder")
	limit := rapid.SampledFrom([]int64{0, 3}).Draw(t, "perUserLimit")
	if m.mode == lua.ModeDraw {
		m.maxq = 1 // a draw sells one unit per win
	}
	m.fault = &faultScripter{Scripter: rdb, names: lua.ScriptNames()}
	do := func(fn func(context.Context) error) error { return fn(ctx) }
	m.stock = &lua.Sharded{RDB: rdb, MarkerTTL: time.Hour, Do: do,
		ReserveShard: func(k lua.Keys, a lua.ReserveArgs) (lua.ReserveResult, error) { return lua.Reserve(ctx, m.fault, k, a) },
		TransferID:   func(int64, int) string { tid, _ := m.token(); return "x" + tid }}
	m.saga = &lua.AdmissionSaga{RDB: m.fault, Do: do, Reserve: m.stock.Reserve, NewToken: m.token}
	now := time.Now()
	if err := luatest.Flush(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if err := m.stock.LoadProduct(lua.Product{ID: pid, Total: m.total, Shards: m.shards, Price: 100, PerUserLimit: limit,
		MaxPerOrder: m.maxq, SaleStart: now.Add(time.Hour), SaleEnd: now.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	rs := lua.RoomSettings{On: true, Window: time.Minute, Mode: m.mode, Commitment: testSeed.Commitment(), Shards: m.shards}
	if m.mode == lua.ModeDraw {
		rs.Reserve = 1
	}
	if err := lua.SetRoom(ctx, rdb, pid, rs); err != nil {
		t.Fatal(err)
	}
	return m
}

// token is a new claim token or ticket id: 16 hex digits, unique.
func (m *roomModel) token() (string, error) { return fmt.Sprintf("%016x", m.tokens.Add(1)), nil }

func (m *roomModel) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"take":       m.take,
		"open":       m.open,
		"admit":      func(t *rapid.T) { m.admit(t) },
		"order":      func(t *rapid.T) { m.order(t, false) },
		"orderFault": func(t *rapid.T) { m.order(t, true) },
		"retry":      m.retry,
		"burst":      m.burst,
		"release":    m.release,
		"expire":     m.expire,
		"lapse":      m.lapse,
		"":           m.check,
	}
}

func (m *roomModel) take(t *rapid.T) {
	u := rapid.SampledFrom(m.users).Draw(t, "user")
	tid, _ := m.token()
	_, err := lua.Take(context.Background(), m.rdb, m.pid, lua.TakeArgs{UserID: u, TicketID: tid})
	for _, ok := range []error{lua.ErrSoldOut, lua.ErrDrawClosed, lua.ErrLimitExceeded} {
		if errors.Is(err, ok) {
			err = nil
		}
	}
	if err != nil {
		t.Fatalf("take of user %d: %v", u, err)
	}
}

// open is the sale's opening: every shard's start passes, the pacer's
// first step asks for the shuffle and it is published.
func (m *roomModel) open(t *rapid.T) {
	if m.opened {
		t.Skip("opened already")
	}
	ctx := context.Background()
	for sh := range m.shards {
		if err := m.rdb.HSet(ctx, lua.ShardKeys(m.pid, sh).Stock(), "start", time.Now().Add(-time.Second).UnixMilli()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	res, err := lua.Admit(ctx, m.rdb, m.pid, m.admitArgs(t))
	if err != nil || res.Code != lua.AdmitShuffle {
		t.Fatalf("first step after the opening: %+v %v", res, err)
	}
	if _, err := lua.ShuffleRoom(ctx, m.rdb, m.pid, m.mode, testSeed, m.left(t)); err != nil {
		t.Fatal(err)
	}
	m.opened = true
}

func (m *roomModel) left(t *rapid.T) int64 {
	if m.shards == 1 {
		return -1
	}
	n, err := lua.UnitsLeft(context.Background(), m.rdb, m.pid, m.shards)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (m *roomModel) admitArgs(t *rapid.T) lua.AdmitArgs {
	return lua.AdmitArgs{Rate: 100_000, Max: 10, MaxElapsed: time.Second, Window: time.Minute, Left: m.left(t), Overbook: 1}
}

// admit is a pacer step; the buyers it admits are granted an admission.
func (m *roomModel) admit(t *rapid.T) {
	ctx := context.Background()
	a := m.admitArgs(t)
	if m.mode == lua.ModeRandom && m.opened {
		keys, err := lua.FreshKeys(ctx, m.rdb, m.pid, testSeed)
		if err != nil {
			t.Fatal(err)
		}
		a.Keys = keys
	}
	time.Sleep(time.Millisecond) // the rate's budget is time since the last step
	res, err := lua.Admit(ctx, m.rdb, m.pid, a)
	if err != nil {
		t.Fatal(err)
	}
	for _, ad := range res.Admitted {
		m.granted[ad.UserID]++
	}
}

func (m *roomModel) order(t *rapid.T, faulty bool) {
	u := rapid.SampledFrom(m.users).Draw(t, "user")
	rid := rapid.SampledFrom([]string{"a", "b", "c", "new"}).Draw(t, "requestId")
	if rid == "new" {
		m.seq++
		rid = "n" + strconv.Itoa(m.seq)
	}
	q := rapid.Int64Range(1, m.maxq+1).Draw(t, "quantity")
	at, after := 0, false
	if faulty {
		at = rapid.IntRange(1, 4).Draw(t, "failCall")
		after = rapid.Bool().Draw(t, "failAfterRunning")
	}
	m.send(t, u, orderCall{rid, q}, at, after)
}

// retry sends a buyer's last order again, unchanged.
func (m *roomModel) retry(t *rapid.T) {
	u := rapid.SampledFrom(m.users).Draw(t, "user")
	c, ok := m.last[u]
	if !ok {
		t.Skip("no order to retry")
	}
	m.send(t, u, c, 0, false)
}

// send places one order of u and checks what it did against what the
// documented rules say it must (when no fault fired).
func (m *roomModel) send(t *rapid.T, u int64, c orderCall, failAt int, after bool) {
	m.last[u] = c
	m.orders++
	before := m.observe(t)
	home := lua.HomeShard(u, m.shards)
	args := lua.ReserveArgs{OrderNo: m.gen.Next(m.pid, home), UserID: u, RequestID: c.rid, Quantity: c.qty, TTL: time.Hour}
	m.fault.arm(failAt, after)
	var res lua.ReserveResult
	var err error
	switch {
	case m.shards == 1: // the gateway's one-shard path: the admission checked and used in reserve.lua
		args.Admission = true
		res, _, err = m.stock.Reserve(m.pid, 1, 0, args)
	case *plantOldGiveBack:
		res, err = m.oldShardedOrder(home, args)
	default:
		res, _, err = m.saga.Order(m.pid, m.shards, home, args)
	}
	fired := m.fault.disarm()
	now := m.observe(t)
	t.Logf("user %d %s×%d: %v %v (fault: %q); reserved %d→%d, usable admissions %d→%d",
		u, c.rid, c.qty, res.OrderNo, err, fired, len(before.res[u]), len(now.res[u]), before.live[u], now.live[u])
	added := len(now.res[u]) - len(before.res[u])
	if added < 0 || added > 1 || (err == nil && added != 1) {
		t.Fatalf("user %d: %d reservations added, answer %v", u, added, err)
	}
	if prev, ok := before.byRequest(u, c.rid); ok && err == nil {
		t.Fatalf("user %d: requestId %s reserved again (first as %s)", u, c.rid, prev.orderNo)
	}
	if fired != "" {
		return
	}
	if err != nil && !lua.Answered(err) {
		t.Fatalf("user %d: %v without a fault", u, err)
	}
	if prev, ok := before.byRequest(u, c.rid); ok {
		if (!errors.Is(err, lua.ErrDuplicate) || res.OrderNo != prev.orderNo) && !errors.Is(err, lua.ErrKeyReused) {
			t.Fatalf("user %d: requestId %s was reserved as %s, answered %v %s", u, c.rid, prev.orderNo, err, res.OrderNo)
		}
		if errors.Is(err, lua.ErrDuplicate) && prev.qty != c.qty {
			t.Fatalf("user %d: DUPLICATE for quantity %d of an intent reserved with %d", u, c.qty, prev.qty)
		}
	}
	// A buyer holds one admission at a time: one given back while it holds
	// another (a pending claim left by a fault, and a newer admission)
	// passes on as an expired one (room_claim_giveback.lua).
	merged := int(now.room.Expired - before.room.Expired)
	if merged < 0 || merged > 1 || (merged == 1 && before.live[u] < 2) {
		t.Fatalf("user %d: the room's expired count went %d → %d in an order", u, before.room.Expired, now.room.Expired)
	}
	switch {
	case err == nil: // a 202 uses an admission
		if now.live[u] != before.live[u]-1-merged {
			t.Fatalf("user %d: reserved with %d usable admissions before and %d after (%d passed on), want one used",
				u, before.live[u], now.live[u], merged)
		}
	case errors.Is(err, lua.ErrNotAdmitted) && before.live[u] > 0:
		t.Fatalf("user %d: NOT_ADMITTED while holding a usable admission", u)
	case now.live[u] != before.live[u]-merged:
		t.Fatalf("user %d: refused (%v) and its usable admissions went %d → %d (%d passed on): a refusal keeps the admission",
			u, err, before.live[u], now.live[u], merged)
	}
	if now.pending[u] && !*plantOldGiveBack { // the old path marked nothing used
		t.Fatalf("user %d: a claim left pending by an order without a fault", u)
	}
}

// burst sends 2–4 orders of one buyer at once (new and reused requestIds,
// changed quantities, no fault): only the invariants are checked after it,
// whatever the interleaving.
func (m *roomModel) burst(t *rapid.T) {
	u := rapid.SampledFrom(m.users).Draw(t, "user")
	calls := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) orderCall {
		return orderCall{rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "requestId"), rapid.Int64Range(1, m.maxq+1).Draw(t, "quantity")}
	}), 2, 4).Draw(t, "orders")
	home := lua.HomeShard(u, m.shards)
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		args := lua.ReserveArgs{OrderNo: m.gen.Next(m.pid, home), UserID: u, RequestID: c.rid, Quantity: c.qty, TTL: time.Hour}
		wg.Go(func() {
			switch {
			case m.shards == 1:
				args.Admission = true
				_, _, errs[i] = m.stock.Reserve(m.pid, 1, 0, args)
			case *plantOldGiveBack:
				_, errs[i] = m.oldShardedOrder(home, args)
			default:
				_, _, errs[i] = m.saga.Order(m.pid, m.shards, home, args)
			}
		})
	}
	wg.Wait()
	m.orders += len(calls)
	t.Logf("user %d at once %v: %v", u, calls, errs)
	for _, err := range errs {
		if err != nil && !lua.Answered(err) && !errors.Is(err, lua.ErrClaimContended) {
			t.Fatalf("user %d: %v without a fault", u, err)
		}
	}
}

// oldShardedOrder is the gateway's sharded order path before the saga:
// claim, reserve under the claim, and give the claim back after any answer
// but a success or a replay (IDEMPOTENCY_KEY_REUSED included), without
// asking the home shard what the claim holds; no claim is marked used.
func (m *roomModel) oldShardedOrder(home int, args lua.ReserveArgs) (lua.ReserveResult, error) {
	ctx := context.Background()
	tok, _ := m.token()
	c, err := lua.ClaimAdmission(ctx, m.fault, m.pid, args.UserID, args.RequestID, tok)
	if err != nil {
		return lua.ReserveResult{}, err
	}
	if c.Code != lua.ClaimTaken {
		res, _, err := m.stock.Reserve(m.pid, m.shards, home, args)
		if errors.Is(err, lua.ErrRoomOn) {
			err = lua.ErrNotAdmitted
		}
		return res, err
	}
	args.Claim = c.Token
	res, _, err := m.stock.Reserve(m.pid, m.shards, home, args)
	if err != nil && !errors.Is(err, lua.ErrDuplicate) && lua.Answered(err) {
		lua.GiveClaimBack(ctx, m.fault, m.pid, args.UserID, c.Token) // as the old gateway: an error only logged
	}
	return res, err
}

// release cancels one of a buyer's reservations (release.lua).
func (m *roomModel) release(t *rapid.T) {
	u := rapid.SampledFrom(m.users).Draw(t, "user")
	var live []reservation
	for _, r := range m.observe(t).res[u] {
		if !m.released[r.orderNo] {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		t.Skip("nothing to release")
	}
	r := rapid.SampledFrom(live).Draw(t, "order")
	if _, _, err := lua.Release(context.Background(), m.rdb, lua.ShardKeys(m.pid, r.shard), r.orderNo, u, r.qty, time.Hour); err != nil {
		t.Fatal(err)
	}
	m.released[r.orderNo] = true
}

// expire lets a buyer's live admission pass its deadline, and runs the
// pacer step that expires it.
func (m *roomModel) expire(t *rapid.T) {
	u := rapid.SampledFrom(m.users).Draw(t, "user")
	ctx := context.Background()
	n, err := m.rdb.ZAddXX(ctx, lua.Room(m.pid).Admitted(), redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: u}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		if _, err := m.rdb.ZScore(ctx, lua.Room(m.pid).Admitted(), strconv.FormatInt(u, 10)).Result(); errors.Is(err, redis.Nil) {
			t.Skip("no live admission")
		}
	}
	m.admit(t)
}

// lapse drops a buyer's claim as its TTL would (the admission's deadline +
// 1 min): a pending claim nobody resumed spends its admission unused.
func (m *roomModel) lapse(t *rapid.T) {
	u := rapid.SampledFrom(m.users).Draw(t, "user")
	if m.shards == 1 {
		t.Skip("one shard: no claims")
	}
	key := lua.Room(m.pid).Claim(u)
	v, err := m.rdb.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		t.Skip("no claim")
	}
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(v, " p") {
		m.lapsed++
	}
	m.rdb.Del(context.Background(), key)
}

type reservation struct {
	orderNo, rid string
	qty          int64
	shard        int
}

// observation is what Redis holds, read between actions.
type observation struct {
	res     map[int64][]reservation // per buyer, from the intake streams
	live    map[int64]int           // per buyer: usable admissions (live in the room, or a pending claim holding nothing)
	pending map[int64]bool          // per buyer: a claim is pending
	room    lua.RoomStatus
	nowMs   int64
}

func (o observation) byRequest(u int64, rid string) (reservation, bool) {
	for _, r := range o.res[u] {
		if r.rid == rid {
			return r, true
		}
	}
	return reservation{}, false
}

// observe reads the intake streams, the admissions, the claims and their
// holds, and the room's counters (two pipelined round trips).
func (m *roomModel) observe(t *rapid.T) observation {
	ctx := context.Background()
	o := observation{res: map[int64][]reservation{}, live: map[int64]int{}, pending: map[int64]bool{}}
	room := lua.Room(m.pid)
	pipe := m.rdb.Pipeline()
	tm := pipe.Time(ctx)
	streams := make([]*redis.XMessageSliceCmd, m.shards)
	for sh := range streams {
		streams[sh] = pipe.XRange(ctx, lua.ShardKeys(m.pid, sh).Intake(), "-", "+")
	}
	adm := make([]*redis.FloatCmd, len(m.users))
	claims := make([]*redis.StringCmd, len(m.users))
	for i, u := range m.users {
		adm[i] = pipe.ZScore(ctx, room.Admitted(), strconv.FormatInt(u, 10))
		claims[i] = pipe.Get(ctx, room.Claim(u))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	o.nowMs = tm.Val().UnixMilli()
	for sh, cmd := range streams {
		for _, e := range cmd.Val() {
			r, err := lua.ParseReservation(e.Values)
			if err != nil {
				t.Fatal(err)
			}
			o.res[r.UserID] = append(o.res[r.UserID], reservation{orderNo: r.OrderNo, rid: r.RequestID, qty: r.Quantity, shard: sh})
		}
	}
	holds := map[int64]*redis.StringCmd{}
	deadlines := map[int64]int64{}
	pipe = m.rdb.Pipeline()
	for i, u := range m.users {
		if dl, err := adm[i].Result(); err == nil && int64(dl) > o.nowMs {
			o.live[u]++
		}
		v, err := claims[i].Result()
		if m.shards == 1 || errors.Is(err, redis.Nil) {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 4 || err != nil {
			t.Fatalf("claim of user %d: %q %v", u, v, err)
		}
		if f[3] == "p" {
			o.pending[u] = true
			deadlines[u], _ = strconv.ParseInt(f[1], 10, 64)
			holds[u] = pipe.Get(ctx, lua.ShardKeys(m.pid, lua.HomeShard(u, m.shards)).Hold(u, f[2]))
		}
	}
	if len(holds) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
	}
	for u, cmd := range holds {
		// A pending claim is a usable admission while it holds nothing:
		// the buyer's next order gives it back or uses it.
		if h, err := cmd.Result(); (errors.Is(err, redis.Nil) || h == "~") && deadlines[u] > o.nowMs {
			o.live[u]++
		}
	}
	st, err := lua.ReadRoom(ctx, m.rdb, m.pid)
	if err != nil {
		t.Fatal(err)
	}
	o.room = st
	return o
}

// check is run after every action: the invariants.
func (m *roomModel) check(t *rapid.T) {
	ctx := context.Background()
	m.steps++
	o := m.observe(t)
	for _, u := range m.users {
		if n := len(o.res[u]) + o.live[u]; n > m.granted[u] {
			t.Fatalf("user %d: %d reservations and %d usable admissions from %d admissions granted: an admission bought more than one order",
				u, len(o.res[u]), o.live[u], m.granted[u])
		}
		seen := map[string]bool{}
		for _, r := range o.res[u] {
			if seen[r.rid] {
				t.Fatalf("user %d: requestId %s reserved twice", u, r.rid)
			}
			seen[r.rid] = true
		}
	}
	var avail, held, reserved int64
	for sh := range m.shards {
		a, err := m.rdb.HGet(ctx, lua.ShardKeys(m.pid, sh).Stock(), "available").Int64()
		if err != nil || a < 0 {
			t.Fatalf("shard %d available %d %v", sh, a, err)
		}
		avail += a
	}
	for _, rs := range o.res {
		for _, r := range rs {
			reserved++
			if !m.released[r.orderNo] {
				held += r.qty
			}
		}
	}
	if avail+held != m.total {
		t.Fatalf("units: %d available + %d reserved ≠ %d total", avail, held, m.total)
	}
	st := o.room
	if m.shards == 1 {
		if st.Admitted != st.Live+st.Expired+reserved {
			t.Fatalf("room: admitted %d ≠ live %d + expired %d + reservations %d", st.Admitted, st.Live, st.Expired, reserved)
		}
		return
	}
	if st.Admitted != st.Live+st.Expired+st.Claimed {
		t.Fatalf("room: admitted %d ≠ live %d + expired %d + claimed %d", st.Admitted, st.Live, st.Expired, st.Claimed)
	}
	pending := int64(len(o.pending))
	if st.Claimed != pending+st.Used+m.lapsed && !*plantOldGiveBack { // the old path marked nothing used
		t.Fatalf("room: claimed %d ≠ pending %d + used %d + lapsed %d", st.Claimed, pending, st.Used, m.lapsed)
	}
}
