package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/bench/loadgen"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/pipeline"
)

// Issue 28's scenarios.
//
// tickets: the waiting room's ticket issuance at sale-day scale against the
// bare HTTP stack, in one run: GET /healthz closed loop (ClosedConns
// connections, ClosedDuration), then every one of Users buyers takes a
// ticket (POST /api/products/{id}/queue, a new one each: one Redis call)
// over the same connections as fast as the gateway answers; then the same
// in ticketRounds interleaved rounds on a new product at each of
// TicketConns connection counts (ticketSweep, interleavedTickets).
// Reported: both rates and their ratio (issue 28 asks ≥ 0.5), the rounds'
// ratios at each count, the best ticket rate against the best bare rate,
// the service times and the Redis script calls per ticket.
//
// draw: DrawEntries buyers enter a draw for DrawUnits units (DrawReserve on
// the reserve list) as fast as the gateway answers; the draw then closes
// (its saleStart is moved to now + 2 s), the pacer shuffles the entries and
// admits the winners, and every entrant asks for its result once the
// shuffle is published; winners order at once. DrawSockets sample
// entrants follow the draw over push. Reported: entries/s, the close → shuffle
// published and → every winner admitted times, the time until every entrant
// was told (the API sweep's last answer) and the sample sockets' slowest
// result; checked: every unit sold exactly once, one entry per user, the
// counts of winners, reserves and losers.

// Scenario names.
const (
	Tickets = "tickets"
	Draw    = "draw"
)

// classTicket names a 200 of POST /api/products/{id}/queue.
const classTicket = "200 ticket"

func ticketClass(_ int64, resp *fasthttp.Response, err error) string {
	if err == nil && resp.StatusCode() == fasthttp.StatusOK {
		return classTicket
	}
	return loadgen.DefaultClassify(0, resp, err)
}

// queueBuilder sends request i as user i's POST /api/products/{pid}/queue.
func (r *run) queueBuilder(pid int64, user func(i int64) int) func(int64, *fasthttp.Request) {
	path := []byte(fmt.Sprintf("/api/products/%d/queue", pid))
	return func(i int64, req *fasthttp.Request) {
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURIBytes(path)
		req.Header.SetBytesV("Authorization", r.users.bearer[user(i)])
	}
}

// setRoom sets a product's waiting room through the admin API.
func (r *run) setRoom(ctx context.Context, t *target, pid int64, terms map[string]any) error {
	admin, err := auth.Issue(r.env.JWTSecret, 1, true, time.Hour)
	if err != nil {
		return err
	}
	terms["on"] = true
	status, body, err := t.api.do(ctx, "POST", fmt.Sprintf("/api/admin/products/%d/waiting-room", pid), admin, terms)
	if err != nil || status != 200 {
		return fmt.Errorf("waiting room: %d %s %v", status, body, err)
	}
	return nil
}

func runTickets(ctx context.Context, r *run, t *target) *ScenarioResult {
	s := &ScenarioResult{}
	pid, err := r.createProduct(ctx, t, Tickets, 1_000_000_000, 0)
	if err != nil {
		return s.fail(err)
	}
	s.ProductID = pid
	// Ceiling 1: the pacer admits about nobody, the run measures the tickets alone.
	if err := r.setRoom(ctx, t, pid, map[string]any{"ceiling": 1}); err != nil {
		return s.fail(err)
	}
	meter := r.cpuMeter()
	cpu0 := meter.sample()
	hz, err := r.healthz(ctx, t)
	if err != nil || hz == nil {
		return s.fail(fmt.Errorf("closed-loop healthz: %w", err))
	}
	cpu1 := meter.sample()
	r.logf("%s", closedLine("GET /healthz", hz, ""))
	n := int64(len(r.users.ids))
	before := r.commandStats(ctx)
	var given atomic.Int64
	res, err := r.takeTickets(ctx, t, pid, 0, n, r.p.ClosedConns, &given)
	if err != nil || res == nil {
		return s.fail(fmt.Errorf("closed-loop tickets: %w", err))
	}
	after := r.commandStats(ctx)
	cpu2 := meter.sample()
	r.logf("%s", closedLine("tickets", res, classTicket))
	s.Tables = append(s.Tables, cpuTable(meter.names(), []cpuStep{
		cpuDelta("bare GET /healthz", hz.Count("200"), cpu0, cpu1),
		cpuDelta("take a ticket", res.Count(classTicket), cpu1, cpu2),
	}))
	s.addPhase("bare GET /healthz (closed loop)", 0, hz)
	s.addPhase("take a ticket (closed loop, a new buyer each)", 0, res)
	rate := classRate(res, classTicket)
	s.Headline = Figure{Name: "tickets", Value: rate, Unit: "tickets/s"}
	s.HeadlineLatency = res.Service
	s.figure("bare GET /healthz, closed loop", hz.Throughput, "req/s")
	s.figure("tickets, closed loop", rate, "tickets/s")
	if hz.Throughput > 0 {
		s.figure("tickets / bare healthz", rate/hz.Throughput, "×")
	}
	s.figure("tickets given", float64(given.Load()), "tickets")
	if before != nil && after != nil && given.Load() > 0 {
		if calls := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]; calls > 0 {
			s.figure("tickets per script call (EVALSHA + EVAL; every client of Redis counted, so at least the tickets per room_take.lua run)",
				float64(given.Load())/float64(calls), "tickets")
		}
	}
	s.Latencies = map[string]loadgen.Summary{
		"closed loop: GET /healthz, service time": hz.Service,
		"closed loop: ticket, service time":       res.Service,
	}
	s.Notes = append(s.Notes, fmt.Sprintf("closed loop: %d connections; GET /healthz for %s, then %d buyers each take a new ticket; the figures are answers per second over each run; the script calls counted include the pacer's, the push feed's and the pipeline's of the same Redis",
		r.p.ClosedConns, r.p.ClosedDuration, n))
	sweep, err := ticketSweep(ctx, r, t, s)
	if err != nil {
		return s.fail(err)
	}
	issued, _ := r.env.Redis.HLen(ctx, lua.Room(pid).Tickets()).Result()
	s.Audit = r.audit(ctx, pid, func(_ pipeline.Report, _ pipeline.ProductAudit) []pipeline.Check {
		checks := []pipeline.Check{ticketsCheck("a ticket per buyer", issued, given.Load(), res.Count(classTicket))}
		for _, il := range sweep {
			checks = append(checks, ticketsCheck(fmt.Sprintf("a ticket per buyer (interleaved rounds, %d connections, product %d)", il.conns, il.pid),
				il.issued, il.given, il.answered))
		}
		return checks
	})
	return s
}

// takeTickets has buyers off … off+n-1 each take a ticket for pid, closed
// loop over conns connections, counting in given the answers that gave a
// place in line (WAITING).
func (r *run) takeTickets(ctx context.Context, t *target, pid, off, n int64, conns int, given *atomic.Int64) (*loadgen.Result, error) {
	return r.closedLoopCfg(ctx, t, n, r.queueBuilder(pid, func(i int64) int { return int(off + i) }),
		func(o loadgen.Outcome, resp *fasthttp.Response) {
			if o.Status == 200 && bytes.Contains(resp.Body(), []byte(`"state":"WAITING"`)) {
				given.Add(1)
			}
		}, func(c *loadgen.Config) {
			c.Classify = ticketClass
			c.Workers = conns
		})
}

// ticketsCheck is the audit's check that every 200 gave one ticket: the
// tickets in Redis, the answers WAITING and the 200s all equal.
func ticketsCheck(name string, issued, given, answered int64) pipeline.Check {
	return check(name, issued == given && given == answered,
		"%d tickets in Redis, %d answers WAITING, %d answered 200", issued, given, answered)
}

// ticketRounds is the number of interleaved rounds of the tickets scenario.
const ticketRounds = 10

// interleaved is what interleavedTickets measured and counted at one
// number of connections, on its own product.
type interleaved struct {
	conns                   int
	pid                     int64
	issued, given, answered int64
	hzRate, tkRate          float64 // pooled: answers over the rounds' summed windows
	median, lowest, highest float64 // the rounds' ratios
}

// ticketSweep runs interleavedTickets at each of TicketConns (ClosedConns
// alone if none) and reports, beyond each level's rounds, a table of the
// levels and the strictest comparison: the highest pooled ticket rate of
// any level against the highest pooled bare /healthz rate of any level.
// Why a sweep: the two paths peak at different concurrencies (bare
// /healthz at few connections; tickets, whose requests wait a round trip
// to Redis in a batch, at more), so one count alone flatters one of them.
func ticketSweep(ctx context.Context, r *run, t *target, s *ScenarioResult) ([]interleaved, error) {
	levels := r.p.TicketConns
	if len(levels) == 0 {
		levels = []int{r.p.ClosedConns}
	}
	tb := Table{
		Title:  "Connection counts: the interleaved rounds repeated at each (a new product each; pooled = answers over the rounds' summed windows)",
		Header: []string{"connections", "bare GET /healthz, req/s (pooled)", "tickets/s (pooled)", "pooled ratio", "median round", "lowest–highest round"},
	}
	var out []interleaved
	var bestHz, bestTk interleaved
	for _, c := range levels {
		il, err := interleavedTickets(ctx, r, t, s, c)
		if err != nil {
			return out, err
		}
		out = append(out, il)
		if il.hzRate > bestHz.hzRate {
			bestHz = il
		}
		if il.tkRate > bestTk.tkRate {
			bestTk = il
		}
		tb.Rows = append(tb.Rows, []string{strconv.Itoa(c), fmtNum(il.hzRate), fmtNum(il.tkRate), fmtRatio(ratioOf(il.tkRate, il.hzRate)),
			fmtRatio(il.median), fmtRatio(il.lowest) + "–" + fmtRatio(il.highest)})
	}
	if len(out) > 1 && bestHz.hzRate > 0 {
		s.Tables = append(s.Tables, tb)
		s.figure(fmt.Sprintf("tickets / bare healthz, best against best: tickets at %d connections / healthz at %d connections (pooled rates)", bestTk.conns, bestHz.conns),
			bestTk.tkRate/bestHz.hzRate, "×")
		r.logf("   best against best: tickets %s/s at %d connections, healthz %s/s at %d: %.2f×",
			fmtNum(bestTk.tkRate), bestTk.conns, fmtNum(bestHz.hzRate), bestHz.conns, bestTk.tkRate/bestHz.hzRate)
	}
	return out, nil
}

func fmtRatio(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "×" }

// ratioOf is a / b, 0 when b is not positive.
func ratioOf(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// interleavedTickets measures the same two loops again, over conns
// connections, in ticketRounds rounds, each bare GET /healthz for
// ClosedDuration/ticketRounds and then a tenth of the buyers taking a new
// ticket on a new product, so that each round's pair meets the machine in
// the same state: on a shared host whose speed drifts within seconds, two
// 5-second loops one after the other can each meet another machine (bare
// /healthz moved between 34,000 and 65,000 req/s in runs minutes apart,
// docs/waiting-room-performance.md "One take pipeline in flight"). The
// method is the interleaving benchmark harnesses use against drift (e.g.
// benchstat's advice to alternate old and new runs). Reported: each
// round's rates and ratio, their median and range, and the pooled rates
// (answers over the summed windows); the figures of conns = ClosedConns
// keep their names of earlier reports, the others name their count.
func interleavedTickets(ctx context.Context, r *run, t *target, s *ScenarioResult, conns int) (interleaved, error) {
	out := interleaved{conns: conns}
	pid, err := r.createProduct(ctx, t, fmt.Sprintf("%s (interleaved, %d connections)", Tickets, conns), 1_000_000_000, 0)
	if err != nil {
		return out, err
	}
	out.pid = pid
	if err := r.setRoom(ctx, t, pid, map[string]any{"ceiling": 1}); err != nil {
		return out, err
	}
	n := int64(len(r.users.ids))
	rounds := min(int64(ticketRounds), n) // a round without buyers would run for its duration instead
	if rounds == 0 {
		return out, errors.New("interleaved rounds: no buyers")
	}
	per := n / rounds
	d := r.p.ClosedDuration / time.Duration(rounds)
	tb := Table{
		Title: fmt.Sprintf("Interleaved rounds, %d connections: bare GET /healthz for %s, then %d new buyers take a ticket (product %d), %d times; "+
			"each round's pair meets the machine in the same state", conns, d, per, pid, rounds),
		Header: []string{"round", "bare GET /healthz, req/s", "tickets/s", "ratio"},
	}
	var ratios []float64
	var hzN, hzS, tkN, tkS float64
	var given atomic.Int64
	for k := range rounds {
		hz, err := r.healthzFor(ctx, t, d, conns)
		if err != nil || hz == nil {
			return out, fmt.Errorf("interleaved round %d (%d connections), healthz: %w", k+1, conns, err)
		}
		res, err := r.takeTickets(ctx, t, pid, k*per, per, conns, &given)
		if err != nil || res == nil {
			return out, fmt.Errorf("interleaved round %d (%d connections), tickets: %w", k+1, conns, err)
		}
		out.answered += res.Count(classTicket)
		tk := classRate(res, classTicket)
		hzN += hz.Throughput * hz.WindowS
		hzS += hz.WindowS
		tkN += tk * res.WindowS
		tkS += res.WindowS
		ratio := ratioOf(tk, hz.Throughput)
		ratios = append(ratios, ratio)
		tb.Rows = append(tb.Rows, []string{strconv.FormatInt(k+1, 10), fmtNum(hz.Throughput), fmtNum(tk), fmtRatio(ratio)})
	}
	out.given = given.Load()
	out.issued, _ = r.env.Redis.HLen(ctx, lua.Room(pid).Tickets()).Result()
	slices.Sort(ratios)
	out.median = (ratios[(len(ratios)-1)/2] + ratios[len(ratios)/2]) / 2
	out.lowest, out.highest = ratios[0], ratios[len(ratios)-1]
	if hzS > 0 && tkS > 0 {
		out.hzRate, out.tkRate = hzN/hzS, tkN/tkS
	}
	s.Tables = append(s.Tables, tb)
	name := "tickets / bare healthz, interleaved"
	if conns != r.p.ClosedConns {
		name = fmt.Sprintf("tickets / bare healthz, interleaved at %d connections", conns)
	}
	if out.hzRate > 0 {
		s.figure(name+" (answers over the rounds' summed windows)", out.tkRate/out.hzRate, "×")
	}
	s.figure(name+": median round", out.median, "×")
	s.figure(name+": lowest round", out.lowest, "×")
	s.figure(name+": highest round", out.highest, "×")
	r.logf("   interleaved, %d connections, %d rounds: healthz %s/s, tickets %s/s pooled; ratio median %.2f× (%.2f–%.2f×)",
		conns, rounds, fmtNum(out.hzRate), fmtNum(out.tkRate), out.median, out.lowest, out.highest)
	return out, nil
}

// drawSocket is one sample entrant following the draw over push.
type drawSocket struct {
	buyer     int
	connected atomic.Bool
	mu        sync.Mutex
	firstOf   map[string]int64 // state → unix ns of its first message after the close
	final     string           // its last state
}

// told is when the socket was first told its final state after the close (0: never).
func (ds *drawSocket) told() int64 {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.final == "PRE_QUEUE" || ds.final == "SHUFFLING" {
		return 0
	}
	return ds.firstOf[ds.final]
}

func runDraw(ctx context.Context, r *run, t *target) *ScenarioResult {
	p := r.p
	s := &ScenarioResult{}
	admin, err := auth.Issue(r.env.JWTSecret, 1, true, time.Hour)
	if err != nil {
		return s.fail(err)
	}
	pid, err := r.createDraw(ctx, t, admin)
	if err != nil {
		return s.fail(err)
	}
	s.ProductID = pid
	entries := min(p.DrawEntries, len(r.users.ids))
	r.logf("   %d entrants, %d units, reserve list %d", entries, p.DrawUnits, p.DrawReserve)

	res, err := r.closedLoopCfg(ctx, t, int64(entries), r.queueBuilder(pid, func(i int64) int { return int(i) }), nil,
		func(c *loadgen.Config) { c.Classify = ticketClass })
	if err != nil || res == nil {
		return s.fail(fmt.Errorf("entries: %w", err))
	}
	s.addPhase("enter (POST queue, closed loop)", 0, res)
	r.logf("%s", closedLine("draw entries", res, classTicket))
	s.Headline = Figure{Name: "entries", Value: classRate(res, classTicket), Unit: "entries/s"}
	s.HeadlineLatency = res.Service
	s.figure("entries, closed loop", classRate(res, classTicket), "entries/s")

	// Sample sockets, subscribed once their buyer entered.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var closeAt atomic.Int64
	var wg sync.WaitGroup
	socks := r.drawSockets(sctx, t, pid, entries, &closeAt, &wg)
	// One entry per user: entering again answers the same ticket.
	again := 0
	for i := 0; i < min(entries, 200); i++ {
		if tk := r.queueTicket(ctx, t, pid, i); tk != "" && tk == r.queueTicket(ctx, t, pid, i) {
			again++
		}
	}
	time.Sleep(time.Second) // the sample sockets subscribe

	closing, st, err := r.closeDraw(ctx, t, pid, admin, s, &closeAt)
	if err != nil {
		return s.fail(err)
	}
	sw, err := r.drawSweep(ctx, sctx, t, pid, entries, closing, s, &wg)
	if err != nil {
		return s.fail(err)
	}
	told, connected, slowest := socketsTold(socks, closing)
	stop()
	wg.Wait()
	s.figure("sample sockets connected", float64(connected), "sockets")
	s.figure("sample sockets told their result", float64(told), "sockets")
	s.figure("close → slowest sample socket told", float64(slowest)/1e6, "ms")
	s.figure("winners (ADMITTED)", float64(sw.won.Load()), "entrants")
	s.figure("reserve list (WAITING)", float64(sw.reserve.Load()), "entrants")
	s.figure("lost", float64(sw.lost.Load()), "entrants")
	s.figure("orders answered 202", float64(sw.accepted.Load()), "orders")
	wantReserve := min(p.DrawReserve, int64(entries)-min(p.DrawUnits, int64(entries)))
	s.Audit = r.audit(ctx, pid, func(_ pipeline.Report, pa pipeline.ProductAudit) []pipeline.Check {
		return []pipeline.Check{
			ordersCheck(orderCount(pa), sw.accepted.Load(), 0),
			check("every unit sold exactly once", sw.accepted.Load() == p.DrawUnits && sw.refused.Load() == 0,
				"%d orders accepted (%d refused), %d units", sw.accepted.Load(), sw.refused.Load(), p.DrawUnits),
			check("one entry per user", st.PreQueued == int64(entries) && again == min(entries, 200),
				"%d entries for %d entrants; %d of %d entrants asked twice got the same ticket", st.PreQueued, entries, again, min(entries, 200)),
			check("as many winners as units, then the reserve list, the rest lost", sw.won.Load() == p.DrawUnits &&
				sw.reserve.Load() == wantReserve && sw.lost.Load() == int64(entries)-p.DrawUnits-wantReserve && sw.other.Load() == 0,
				"%d won, %d reserve, %d lost, %d other answers", sw.won.Load(), sw.reserve.Load(), sw.lost.Load(), sw.other.Load()),
			check("every sample socket told its result", told == connected, "%d of %d connected sample sockets (slowest %s after the close)",
				told, connected, slowest.Round(time.Millisecond)),
		}
	})
	return s
}

// createDraw creates the draw's product, opening in six hours (closeDraw
// moves it), and sets its room: mode draw, the reserve list, a 5-minute win.
func (r *run) createDraw(ctx context.Context, t *target, admin string) (int64, error) {
	p := r.p
	now := time.Now().UTC()
	status, body, err := t.api.do(ctx, "POST", "/api/admin/products", admin, map[string]any{
		"name": fmt.Sprintf("bench draw %s %s", t.Label, r.id), "price": 100, "stock": p.DrawUnits, "perUserLimit": 1, "maxPerOrder": 1,
		"saleStart": now.Add(6 * time.Hour).Format(time.RFC3339), "saleEnd": now.Add(24 * time.Hour).Format(time.RFC3339), "waitingRoom": true})
	if err != nil || status != 201 {
		return 0, fmt.Errorf("create the draw: %d %s %v", status, body, err)
	}
	var prod struct {
		ID int64 `json:"id"`
	}
	_ = json.Unmarshal(body, &prod)
	return prod.ID, r.setRoom(ctx, t, prod.ID, map[string]any{"mode": "draw", "reserve": p.DrawReserve, "windowSeconds": 300})
}

// drawSockets opens DrawSockets sample entrants' sockets, spread over the
// entrants, each following the draw (followDraw) in wg until ctx ends.
func (r *run) drawSockets(ctx context.Context, t *target, pid int64, entries int, closeAt *atomic.Int64, wg *sync.WaitGroup) []*drawSocket {
	rr := &roomRun{r: r, t: t, pid: pid}
	pushURL := rr.pushURL(ctx)
	var socks []*drawSocket
	if pushURL == "" || r.p.DrawSockets == 0 {
		return nil
	}
	every := max(entries/r.p.DrawSockets, 1)
	for i := every / 2; i < entries && len(socks) < r.p.DrawSockets; i += every {
		ds := &drawSocket{buyer: i}
		socks = append(socks, ds)
		wg.Go(func() { r.followDraw(ctx, pushURL, pid, ds, closeAt) })
	}
	return socks
}

// closeDraw moves the draw's opening to 2 s from now and waits until the
// shuffle is published and every winner admitted, adding those times to s.
// It stores the close in closeAt before it moves the opening: a socket can
// be told its result before every winner is admitted, and a message the
// sample sockets got before closeAt was set went uncounted (a fast run
// counted 1 of 100 sockets told).
func (r *run) closeDraw(ctx context.Context, t *target, pid int64, admin string, s *ScenarioResult, closeAt *atomic.Int64) (time.Time, lua.RoomStatus, error) {
	closing := time.Now().Add(2 * time.Second).UTC().Truncate(time.Millisecond)
	closeAt.Store(closing.UnixNano())
	status, body, err := t.api.do(ctx, "PATCH", fmt.Sprintf("/api/admin/products/%d", pid), admin,
		map[string]any{"saleStart": closing.Format(time.RFC3339Nano)})
	if err != nil || status != 200 {
		return closing, lua.RoomStatus{}, fmt.Errorf("close the draw: %d %s %v", status, body, err)
	}
	var published time.Time
	var st lua.RoomStatus
	for deadline := closing.Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st, err = lua.ReadRoom(ctx, r.env.Redis, pid); err != nil {
			continue
		}
		if st.Shuffled && published.IsZero() {
			published = time.Now()
		}
		if st.Shuffled && st.Admitted >= st.Winners {
			s.figure("close → shuffle published", float64(published.Sub(closing))/1e6, "ms")
			s.figure("shuffle published (Redis clock) after the close", float64(st.ShuffledAt.Sub(closing))/1e6, "ms")
			s.figure("close → every winner admitted", float64(time.Since(closing))/1e6, "ms")
			return closing, st, nil
		}
	}
	return closing, st, errors.New("the draw's winners were not all admitted within 2 minutes of the close")
}

// drawSweepResult counts the answers of the results sweep and the winners' orders.
type drawSweepResult struct {
	won, reserve, lost, other, accepted, refused atomic.Int64
}

// drawSweep has every entrant ask for its result once (closed loop) while
// winners order at once (64 workers in wg, until octx ends); it adds the
// time until the last entrant was told and the sweep's rate to s.
func (r *run) drawSweep(ctx, octx context.Context, t *target, pid int64, entries int, closing time.Time, s *ScenarioResult, wg *sync.WaitGroup) (*drawSweepResult, error) {
	sw := &drawSweepResult{}
	orders := make(chan int, r.p.DrawUnits+16)
	defer close(orders)
	prefix := r.requestPrefix(t, "draw")
	for range 64 {
		wg.Go(func() {
			for i := range orders {
				st, _, err := t.api.do(octx, "POST", "/api/orders", string(bytes.TrimPrefix(r.users.bearer[i], []byte("Bearer "))),
					map[string]any{"productId": pid, "quantity": 1, "requestId": prefix + strconv.Itoa(i)})
				if err == nil && st == 202 {
					sw.accepted.Add(1)
				} else {
					sw.refused.Add(1)
				}
			}
		})
	}
	var lastTold atomic.Int64
	observe := func(o loadgen.Outcome, resp *fasthttp.Response) {
		if o.Status != 200 {
			sw.other.Add(1)
			return
		}
		switch b := resp.Body(); {
		case bytes.Contains(b, []byte(`"state":"ADMITTED"`)):
			sw.won.Add(1)
			orders <- int(o.Index)
		case bytes.Contains(b, []byte(`"state":"WAITING"`)):
			sw.reserve.Add(1)
		case bytes.Contains(b, []byte(`"state":"LOST"`)):
			sw.lost.Add(1)
		default:
			sw.other.Add(1)
			return
		}
		for last := lastTold.Load(); o.Done.UnixNano() > last && !lastTold.CompareAndSwap(last, o.Done.UnixNano()); last = lastTold.Load() {
		}
	}
	sweep, err := r.closedLoopCfg(ctx, t, int64(entries), r.queueBuilder(pid, func(i int64) int { return int(i) }), observe,
		func(c *loadgen.Config) { c.Classify = ticketClass })
	if err != nil || sweep == nil {
		return sw, fmt.Errorf("results sweep: %w", err)
	}
	s.addPhase("results (POST queue, closed loop, after the shuffle)", 0, sweep)
	r.logf("%s", closedLine("draw results", sweep, classTicket))
	s.figure("close → every entrant told (its answer of the results sweep)", float64(lastTold.Load()-closing.UnixNano())/1e6, "ms")
	s.figure("results sweep, closed loop", classRate(sweep, classTicket), "answers/s")
	return sw, nil
}

// socketsTold waits up to 10 s for every connected sample socket to have
// been told its result and returns how many were, of how many, and the
// slowest after the close.
func socketsTold(socks []*drawSocket, closing time.Time) (told, connected int64, slowest time.Duration) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		told, connected, slowest = 0, 0, 0
		for _, ds := range socks {
			if !ds.connected.Load() {
				continue
			}
			connected++
			if f := ds.told(); f != 0 {
				told++
				slowest = max(slowest, time.Duration(f-closing.UnixNano()))
			}
		}
		if told == connected || time.Now().After(deadline) {
			return told, connected, slowest
		}
	}
}

// queueTicket is buyer i's ticket id ("" on any failure).
func (r *run) queueTicket(ctx context.Context, t *target, pid int64, i int) string {
	tok := string(bytes.TrimPrefix(r.users.bearer[i], []byte("Bearer ")))
	status, body, err := t.api.do(ctx, "POST", fmt.Sprintf("/api/products/%d/queue", pid), tok, nil)
	if err != nil || status != 200 {
		return ""
	}
	var pl struct {
		Ticket string `json:"ticket"`
	}
	_ = json.Unmarshal(body, &pl)
	return pl.Ticket
}

// followDraw holds one sample entrant's socket and records when, after the
// close, it was first told each state (its result is the last: ADMITTED,
// WAITING on the reserve list, or LOST).
func (r *run) followDraw(ctx context.Context, url string, pid int64, ds *drawSocket, closeAt *atomic.Int64) {
	tok := string(bytes.TrimPrefix(r.users.bearer[ds.buyer], []byte("Bearer ")))
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ws, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{Subprotocols: []string{"stampede", tok}})
	cancel()
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ds.connected.Store(true)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = ws.Write(wctx, websocket.MessageText, []byte(`{"type":"queue","productId":`+strconv.FormatInt(pid, 10)+`}`))
	cancel()
	if err != nil {
		return
	}
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var m struct {
			Type  string `json:"type"`
			State string `json:"state"`
		}
		if json.Unmarshal(data, &m) != nil || m.Type != "queue" {
			continue
		}
		now := time.Now().UnixNano()
		ds.mu.Lock()
		ds.final = m.State
		if c := closeAt.Load(); c != 0 && now >= c {
			if ds.firstOf == nil {
				ds.firstOf = map[string]int64{}
			}
			if _, ok := ds.firstOf[m.State]; !ok {
				ds.firstOf[m.State] = now
			}
		}
		ds.mu.Unlock()
	}
}
