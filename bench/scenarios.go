package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/bench/loadgen"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

// outcomes counts, over a whole load run (warm-up included), the 202s and
// the requests whose fate the client cannot know (a transport error or a
// 5xx: the reservation may or may not have happened), and remembers when
// the last 202 arrived.
type outcomes struct {
	mu       sync.Mutex
	accepted int64
	unknown  int64
	last     time.Time
}

func (a *outcomes) observe(o loadgen.Outcome, _ *fasthttp.Response) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case o.Class == classAccepted:
		a.accepted++
		if o.Done.After(a.last) {
			a.last = o.Done
		}
	case o.Err != nil || o.Status >= 500:
		a.unknown++
	}
}

func (a *outcomes) counts() (accepted, unknown int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.accepted, a.unknown
}

// classRate is the measured per-second rate of class in res (0 if absent).
func classRate(res *loadgen.Result, class string) float64 {
	if res == nil || res.Classes[class] == nil {
		return 0
	}
	return res.Classes[class].Rate
}

// ordersCheck compares the orders in MySQL with the 202s: equal when every
// answer is known, else between the 202s and the 202s plus the unknowns.
func ordersCheck(n, accepted, unknown int64) pipeline.Check {
	if unknown == 0 {
		return check("one order per 202", n == accepted, "%d orders in MySQL, %d answered 202", n, accepted)
	}
	return check("orders between 202s and 202s + unknown answers", n >= accepted && n <= accepted+unknown,
		"%d orders in MySQL, %d answered 202, %d errors or 5xx of unknown outcome", n, accepted, unknown)
}

func (s *ScenarioResult) addPhase(name string, rate float64, res *loadgen.Result) {
	if res != nil {
		s.Phases = append(s.Phases, Phase{Name: name, Rate: rate, Result: res})
	}
}

func classLatency(res *loadgen.Result, class string) loadgen.Summary {
	if c := res.Classes[class]; c != nil {
		return c.Latency
	}
	return loadgen.Summary{}
}

// runSpike: SpikeBuyers distinct buyers, one request each, for SpikeStock
// units (1 per buyer), at SpikeRate.
func runSpike(ctx context.Context, r *run, t *target) *ScenarioResult {
	p := r.p
	s := &ScenarioResult{}
	pid, err := r.createProduct(ctx, t, Spike, p.SpikeStock, 1)
	if err != nil {
		return s.fail(err)
	}
	s.ProductID = pid
	var acc outcomes
	cfg := r.loadConfig(t)
	cfg.Rate, cfg.Requests = p.SpikeRate, int64(p.SpikeBuyers)
	cfg.Build = r.orderBuilder(pid, r.requestPrefix(t, "sp"), func(i int64) int { return int(i) }, func(i int64) int64 { return i })
	cfg.Observe = acc.observe
	r.logf("   %d buyers, one request each, at %s/s", p.SpikeBuyers, fmtNum(p.SpikeRate))
	res, err := loadgen.Run(ctx, cfg)
	s.addPhase("rush", cfg.Rate, res)
	if err != nil {
		s.fail(err)
	}
	if res == nil {
		return s
	}
	accepted, unknown := acc.counts()
	s.Headline = Figure{Name: "answers", Value: res.Throughput, Unit: "req/s"}
	s.HeadlineLatency = res.Latency
	s.figure("accepted", float64(accepted), "orders")
	s.figure("rejected sold out", float64(res.Count(classSoldOut)), "requests")
	if accepted > 0 {
		s.figure("time to sell out", float64(acc.last.Sub(res.Start))/1e6, "ms")
	}
	s.Latencies = map[string]loadgen.Summary{
		"accepted (202)":          classLatency(res, classAccepted),
		"rejected (409 SOLD_OUT)": classLatency(res, classSoldOut),
	}
	want := min(p.SpikeStock, int64(p.SpikeBuyers))
	s.Audit = r.audit(ctx, pid, func(_ pipeline.Report, pa pipeline.ProductAudit) []pipeline.Check {
		checks := []pipeline.Check{ordersCheck(orderCount(pa), accepted, unknown)}
		if unknown == 0 && res.Abandoned == 0 {
			return append(checks, check("accepted = stock", accepted == want,
				"%d answered 202, want %d (stock %d, %d buyers)", accepted, want, p.SpikeStock, p.SpikeBuyers))
		}
		s.Notes = append(s.Notes, fmt.Sprintf("%d requests of unknown outcome, %d abandoned: accepted checked against the stock as a bound", unknown, res.Abandoned))
		return append(checks, check("accepted ≤ stock", accepted <= p.SpikeStock, "%d answered 202, stock %d", accepted, p.SpikeStock))
	})
	return s
}

// stepVerdict says whether a sustained step is clean: nothing abandoned, no
// error, every answer a 202, p99 within the limit.
func stepVerdict(res *loadgen.Result, limit time.Duration) (bool, string) {
	limitMs := float64(limit) / float64(time.Millisecond)
	switch {
	case res.Abandoned > 0:
		return false, fmt.Sprintf("%d requests abandoned", res.Abandoned)
	case res.Errors > 0:
		return false, fmt.Sprintf("%d errors", res.Errors)
	case res.Count(classAccepted) != res.Measured:
		return false, fmt.Sprintf("%d answers other than 202 (%v)", res.Measured-res.Count(classAccepted), res.ClassNames())
	case res.Latency.P99 > limitMs:
		return false, fmt.Sprintf("p99 %s > %s", fmtMs(res.Latency.P99), fmtMs(limitMs))
	}
	return true, "clean"
}

// runSustained steps the rate through SustainedRates (BaselineRates for a
// baseline target) on one product with a huge stock until a step is not
// clean: its p99 passes SustainedP99, errors appear, or the pipeline fell
// behind (at the end of the step more orders are still PROCESSING than one
// second of intake). The accepted intake is the 202 rate of the highest
// clean step: what the whole system sustains, not the gateway alone. With
// SustainedIntakeAlone each rate is first stepped with the pipeline stopped
// on a product of its own (intakealone.go), then with the full system, and
// the report gives the ratio of the two highest clean steps: interleaved
// rate by rate, so that both halves of the comparison see the same spell of
// a shared machine (run one after the other, a noisy minute decided which
// half lost). A step that is not clean is tried once more (sustainedTries)
// in both halves: one hiccup of the machine does not end the series, two in
// a row do; both tries are in the report.
func runSustained(ctx context.Context, r *run, t *target) *ScenarioResult {
	p := r.p
	s := &ScenarioResult{}
	alone, err := r.intakeAloneStepper(ctx, t)
	if err != nil {
		return s.fail(err)
	}
	pid, err := r.createProduct(ctx, t, Sustained, p.SustainedStock, 0)
	if err != nil {
		return s.fail(err)
	}
	s.ProductID = pid
	rates := p.SustainedRates
	if t.index > 0 && len(p.BaselineRates) > 0 && !r.levels {
		rates = p.BaselineRates
	}
	full := &stepper{pid: pid, prefix: r.requestPrefix(t, "su"), acc: &outcomes{}}
	cpu := &cpuLog{meter: r.cpuMeter()}
	full.cpu = cpu
	if alone != nil {
		alone.cpu = cpu
	}
	for _, rate := range rates {
		if alone != nil && !alone.done {
			if err := r.intakeAloneStep(ctx, t, s, alone, rate); err != nil {
				return s.fail(err)
			}
		}
		if !full.done {
			r.sustainedStep(ctx, t, s, full, rate)
		}
		if full.done && (alone == nil || alone.done) {
			break
		}
	}
	s.Headline = Figure{Name: "accepted intake", Unit: "orders/s"}
	if best := full.best; best != nil {
		s.Headline.Value = classRate(best.Result, classAccepted)
		s.HeadlineLatency = best.Result.Latency
		s.figure("highest clean step", best.Rate, "req/s")
	} else {
		s.Notes = append(s.Notes, "no step was clean: the first step already passed the p99 limit or erred")
	}
	accepted, unknown := full.acc.counts()
	s.figure("accepted", float64(accepted), "orders")
	s.Audit = r.audit(ctx, pid, func(_ pipeline.Report, pa pipeline.ProductAudit) []pipeline.Check {
		return []pipeline.Check{ordersCheck(orderCount(pa), accepted, unknown)}
	})
	if alone != nil {
		intakeAloneFigures(s, r.intakeAloneAudit(ctx, s, alone))
	}
	cpu.figures(s, full, alone)
	return s
}

// sustainedTries is how often a sustained step is run before it counts as
// over the limit.
const sustainedTries = 2

// stepper is one series of sustained steps on one product: the full system
// (label "") or the intake alone (intakeAloneLabel).
type stepper struct {
	pid    int64
	prefix string
	label  string
	acc    *outcomes // every step's outcomes
	offset int64     // requests scheduled so far (their users and requestIds)
	best   *Phase    // the highest clean step (nil: none yet)
	done   bool      // a step was over the limit twice, or erred
	cpu    *cpuLog   // the CPU per order of every step (nil: not measured)
}

// sustainedStep runs st's step at rate, up to sustainedTries times until
// one try is clean, appending a phase per try to s (named label + rate, the
// second "… (2nd try)"). With label "" (the full system) a try is clean only
// if the pipeline kept up as well; with the intake-alone label the pipeline
// is stopped and only the answers and their p99 are judged. After the last
// unclean try, or an error, st is done.
func (r *run) sustainedStep(ctx context.Context, t *target, s *ScenarioResult, st *stepper, rate float64) {
	p := r.p
	nUsers := int64(len(r.users.ids))
	for try := 1; try <= sustainedTries; try++ {
		off := st.offset
		cfg := r.loadConfig(t)
		cfg.Rate, cfg.Warmup, cfg.Duration = rate, p.SustainedWarmup, p.SustainedStep
		cfg.Build = r.orderBuilder(st.pid, st.prefix, func(i int64) int { return int((off + i) % nUsers) }, func(i int64) int64 { return off + i })
		cfg.Observe = st.acc.observe
		cpu0, acc0 := st.cpu.start(st.acc)
		res, err := loadgen.Run(ctx, cfg)
		if res == nil {
			s.fail(err)
			st.done = true
			return
		}
		st.offset += res.Scheduled
		ok, why := stepVerdict(res, p.SustainedP99)
		if ok && st.label == "" {
			ok, why = r.keptUp(ctx, st.pid, st.acc, rate)
		}
		name := st.label + fmtNum(rate) + "/s"
		if try > 1 {
			name += " (2nd try)"
		}
		s.Phases = append(s.Phases, Phase{Name: name, Rate: rate, OK: ptr(ok), Result: res})
		st.cpu.end(name, cpu0, acc0, st.acc)
		r.logf("   %sstep %7s/s (try %d): %8s accepted/s, p50 %s p99 %s max %s, late %d: %s", st.label, fmtNum(rate), try,
			fmtNum(classRate(res, classAccepted)), fmtMs(res.Latency.P50), fmtMs(res.Latency.P99), fmtMs(res.Latency.Max), res.Late, why)
		if err != nil {
			s.fail(err)
			st.done = true
			return
		}
		if ok {
			best := s.Phases[len(s.Phases)-1]
			st.best = &best
			return
		}
	}
	s.figure(st.label+"first step over the limit", rate, "req/s")
	st.done = true
}

// keptUp is the pipeline half of a full-system step's verdict: fewer of
// pid's orders short of WAITING_PAY (or later) at the end of the step than
// one second of intake at rate.
func (r *run) keptUp(ctx context.Context, pid int64, acc *outcomes, rate float64) (bool, string) {
	accepted, _ := acc.counts()
	settled, err := r.settled(ctx, pid)
	switch behind := accepted - settled; {
	case err != nil:
		return false, "counting settled orders: " + err.Error()
	case float64(behind) >= rate:
		return false, fmt.Sprintf("pipeline behind: %d orders still PROCESSING at the end of the step (≥ one second of intake)", behind)
	default:
		return true, fmt.Sprintf("clean (%d PROCESSING at the end)", behind)
	}
}

// runSoldOut sells the product out, then measures rejections per second at
// SoldOutRate.
func runSoldOut(ctx context.Context, r *run, t *target) *ScenarioResult {
	p := r.p
	s := &ScenarioResult{}
	pid, err := r.createProduct(ctx, t, SoldOut, p.SoldOutStock, 0)
	if err != nil {
		return s.fail(err)
	}
	s.ProductID = pid
	prefix := r.requestPrefix(t, "so")
	nUsers := int64(len(r.users.ids))
	user := func(off int64) func(int64) int { return func(i int64) int { return int((off + i) % nUsers) } }
	key := func(off int64) func(int64) int64 { return func(i int64) int64 { return off + i } }

	// Sell out: twice the stock at a modest rate.
	var sold outcomes
	cfg := r.loadConfig(t)
	cfg.Rate, cfg.Requests = min(p.SoldOutRate, 2_000), 2*p.SoldOutStock
	cfg.Build, cfg.Observe = r.orderBuilder(pid, prefix, user(0), key(0)), sold.observe
	sellOut, err := loadgen.Run(ctx, cfg)
	s.addPhase("sell out", cfg.Rate, sellOut)
	if err != nil || sellOut == nil {
		return s.fail(fmt.Errorf("sell out: %v", err))
	}
	soldN, soldUnknown := sold.counts()
	r.logf("   sold out: %d accepted of %d units", soldN, p.SoldOutStock)

	var late outcomes
	cfg = r.loadConfig(t)
	cfg.Rate, cfg.Warmup, cfg.Duration = p.SoldOutRate, p.SoldOutWarmup, p.SoldOutDuration
	cfg.Build, cfg.Observe = r.orderBuilder(pid, prefix, user(2*p.SoldOutStock), key(2*p.SoldOutStock)), late.observe
	r.logf("   storm at %s/s for %s after %s warm-up", fmtNum(cfg.Rate), cfg.Duration, cfg.Warmup)
	storm, err := loadgen.Run(ctx, cfg)
	s.addPhase("storm", cfg.Rate, storm)
	if err != nil {
		s.fail(err)
	}
	if storm != nil {
		s.Headline = Figure{Name: "sold-out rejections", Unit: "rejections/s"}
		if c := storm.Classes[classSoldOut]; c != nil {
			s.Headline.Value = c.Rate
		}
		s.HeadlineLatency = classLatency(storm, classSoldOut)
		s.figure("answers", storm.Throughput, "req/s")
	}
	r.soldOutClosedLoop(ctx, t, s, pid, prefix, late.observe) // closedloop.go
	lateN, lateUnknown := late.counts()
	accepted, unknown := soldN+lateN, soldUnknown+lateUnknown
	s.Audit = r.audit(ctx, pid, func(_ pipeline.Report, pa pipeline.ProductAudit) []pipeline.Check {
		checks := []pipeline.Check{
			check("nothing accepted after the sell-out", lateN == 0, "%d answered 202 during the storm", lateN),
			ordersCheck(orderCount(pa), accepted, unknown),
		}
		if soldUnknown == 0 && sellOut.Abandoned == 0 {
			return append(checks, check("accepted = stock", soldN == p.SoldOutStock, "%d answered 202 while selling out, stock %d", soldN, p.SoldOutStock))
		}
		return append(checks, check("accepted ≤ stock", accepted <= p.SoldOutStock, "%d answered 202, stock %d", accepted, p.SoldOutStock))
	})
	return s
}

// duplicateSchedule orders keys × replays sends: in rounds, each round
// sending every key burst times in a row (concurrent duplicates), so later
// rounds replay requests whose orders may already be in MySQL.
func duplicateSchedule(keys, replays, burst int) []int32 {
	out := make([]int32, 0, keys*replays)
	for sent := 0; sent < replays; sent += burst {
		b := min(burst, replays-sent)
		for k := range keys {
			for range b {
				out = append(out, int32(k))
			}
		}
	}
	return out
}

// runDuplicate sends each of DuplicateKeys (user, requestId) pairs
// DuplicateReplays times and checks that each got one order and one orderNo.
func runDuplicate(ctx context.Context, r *run, t *target) *ScenarioResult {
	p := r.p
	s := &ScenarioResult{}
	keys := p.DuplicateKeys
	// Twice the stock needed: a duplicate that slipped through would show as
	// an extra order rather than hide behind SOLD_OUT.
	pid, err := r.createProduct(ctx, t, Duplicate, 2*int64(keys), 0)
	if err != nil {
		return s.fail(err)
	}
	s.ProductID = pid
	d := &dupTally{sched: duplicateSchedule(keys, p.DuplicateReplays, p.DuplicateBurst), prefix: r.requestPrefix(t, "du"),
		nUsers: len(r.users.ids), nos: make([]string, keys), accepts: make([]int32, keys)}
	cfg := r.loadConfig(t)
	cfg.Rate, cfg.Requests = p.DuplicateRate, int64(len(d.sched))
	cfg.Build = r.orderBuilder(pid, d.prefix, func(i int64) int { return d.userOf(int(d.sched[i])) }, func(i int64) int64 { return int64(d.sched[i]) })
	cfg.Observe = d.observe
	r.logf("   %d requestIds × %d sends (bursts of %d) at %s/s", keys, p.DuplicateReplays, min(p.DuplicateBurst, p.DuplicateReplays), fmtNum(cfg.Rate))
	res, err := loadgen.Run(ctx, cfg)
	s.addPhase("storm", cfg.Rate, res)
	if err != nil {
		s.fail(err)
	}
	if res == nil {
		return s
	}
	s.Headline = Figure{Name: "answers", Value: res.Throughput, Unit: "req/s"}
	s.HeadlineLatency = res.Latency
	s.Latencies = map[string]loadgen.Summary{
		"first (202)":  classLatency(res, classAccepted),
		"replay (200)": classLatency(res, classReplay),
	}
	s.figure("replays answered 200", float64(res.Count(classReplay)), "requests")
	s.Audit = r.audit(ctx, pid, func(_ pipeline.Report, pa pipeline.ProductAudit) []pipeline.Check {
		return r.duplicateChecks(ctx, pid, pa, d, res)
	})
	return s
}

// dupTally is what the duplicate storm's answers said, per key (sched[i]
// is request i's key; key k is buyer k mod nUsers's).
type dupTally struct {
	sched  []int32
	prefix string
	nUsers int

	mu                          sync.Mutex
	nos                         []string // key → the orderNo of its first answer
	accepts                     []int32  // key → its 202s
	conflicts, missing, unknown int64    // other orderNos; 200/202 without one; errors and 5xx
}

func (d *dupTally) userOf(k int) int { return k % d.nUsers }

// observe is the load's Observe: it tallies one answer.
func (d *dupTally) observe(o loadgen.Outcome, resp *fasthttp.Response) {
	if o.Class != classAccepted && o.Class != classReplay {
		if o.Err != nil || o.Status >= 500 {
			d.mu.Lock()
			d.unknown++
			d.mu.Unlock()
		}
		return
	}
	k := d.sched[o.Index]
	no := loadgen.StringField(resp.Body(), "orderNo")
	d.mu.Lock()
	defer d.mu.Unlock()
	if o.Class == classAccepted {
		d.accepts[k]++
	}
	switch {
	case no == "":
		d.missing++
	case d.nos[k] == "":
		d.nos[k] = no
	case d.nos[k] != no:
		d.conflicts++
	}
}

// duplicateChecks are the duplicate scenario's audit checks: one orderNo
// and at most one 202 per key, every key accepted (when no answer was
// lost), and MySQL's orders the answered ones.
func (r *run) duplicateChecks(ctx context.Context, pid int64, pa pipeline.ProductAudit, d *dupTally, res *loadgen.Result) []pipeline.Check {
	var multi, never, answered int
	for k := range d.nos {
		switch {
		case d.accepts[k] > 1:
			multi++
		case d.accepts[k] == 0:
			never++
		}
		if d.nos[k] != "" {
			answered++
		}
	}
	checks := []pipeline.Check{
		check("one orderNo per requestId", d.conflicts == 0 && d.missing == 0,
			"%d answers with an orderNo differing from the requestId's first, %d 200/202 answers without orderNo", d.conflicts, d.missing),
		check("at most one 202 per requestId", multi == 0, "%d requestIds answered 202 more than once", multi),
	}
	if d.unknown == 0 && res.Abandoned == 0 {
		checks = append(checks, check("every requestId accepted once", never == 0, "%d requestIds never answered 202", never))
	}
	rows, err := r.ordersByRequest(ctx, pid)
	if err != nil {
		return append(checks, check("MySQL orders match the answers", false, "read orders: %v", err))
	}
	mismatch := 0
	for k, no := range d.nos {
		if no == "" {
			continue
		}
		if rows[requestKey{r.users.ids[d.userOf(k)], fmt.Sprintf("%s%d", d.prefix, k)}] != no {
			mismatch++
		}
	}
	n := orderCount(pa)
	counted := n == int64(len(rows)) && n >= int64(answered) && n <= int64(answered)+d.unknown
	return append(checks, check("MySQL orders match the answers", mismatch == 0 && counted,
		"%d requestIds answered an orderNo, %d orders in MySQL (%d answers of unknown outcome), %d answered orderNos not in MySQL under their (user, requestId)",
		answered, n, d.unknown, mismatch))
}

type requestKey struct {
	user    int64
	request string
}

// ordersByRequest maps (user, requestId) → orderNo for every order of pid.
func (r *run) ordersByRequest(ctx context.Context, pid int64) (map[requestKey]string, error) {
	rows, err := r.env.Store.DB.QueryContext(ctx, `SELECT user_id, request_id, order_no FROM order_info WHERE product_id = ?`, pid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[requestKey]string{}
	for rows.Next() {
		var k requestKey
		var no string
		if err := rows.Scan(&k.user, &k.request, &no); err != nil {
			return nil, err
		}
		out[k] = no
	}
	return out, rows.Err()
}

// drainSample is one poll of the number of orders that reached WAITING_PAY.
type drainSample struct {
	at time.Time
	n  int64
}

// drainRate is the slope of the samples between 10 % and 90 % of final: the
// steady pipeline rate without the ramp-up and the tail. 0 if the samples
// cannot tell.
func drainRate(samples []drainSample, final int64) float64 {
	if final <= 0 {
		return 0
	}
	lo, hi := -1, -1
	for i, s := range samples {
		if lo < 0 && float64(s.n) >= 0.1*float64(final) {
			lo = i
		}
		if hi < 0 && float64(s.n) >= 0.9*float64(final) {
			hi = i
		}
	}
	if lo < 0 || hi <= lo {
		return 0
	}
	d := samples[hi].at.Sub(samples[lo].at).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(samples[hi].n-samples[lo].n) / d
}

// runE2E loads E2ERate for E2EDuration and follows the orders to
// WAITING_PAY: polled counts give the drain rate, and MySQL's created_at
// (the Redis acceptance time) and updated_at of the WAITING_PAY transition
// give each order's time from 202 to WAITING_PAY.
func runE2E(ctx context.Context, r *run, t *target) *ScenarioResult {
	p := r.p
	s := &ScenarioResult{}
	stock := max(int64(math.Ceil(2*p.E2ERate*p.E2EDuration.Seconds())), 1000)
	pid, err := r.createProduct(ctx, t, E2E, stock, 0)
	if err != nil {
		return s.fail(err)
	}
	s.ProductID = pid
	pctx, cancelPoll := context.WithCancel(ctx)
	defer cancelPoll()
	w := r.startWaitingPoller(pctx, pid)

	var acc outcomes
	cfg := r.loadConfig(t)
	cfg.Rate, cfg.Duration = p.E2ERate, p.E2EDuration
	nUsers := int64(len(r.users.ids))
	cfg.Build = r.orderBuilder(pid, r.requestPrefix(t, "e2"), func(i int64) int { return int(i % nUsers) }, func(i int64) int64 { return i })
	cfg.Observe = acc.observe
	r.logf("   %s/s for %s, following every order to WAITING_PAY", fmtNum(cfg.Rate), cfg.Duration)
	res, err := loadgen.Run(ctx, cfg)
	s.addPhase("intake", cfg.Rate, res)
	if err != nil {
		s.fail(err)
	}
	accepted, unknown := acc.counts()
	w.await(ctx, s, accepted, r.env.IdleWait)
	if res != nil && len(w.samples) > 0 {
		last := w.samples[len(w.samples)-1]
		s.Headline = Figure{Name: "drain rate", Value: drainRate(w.samples, last.n), Unit: "orders/s"}
		s.figure("drain rate", s.Headline.Value, "orders/s")
		if last.n > 0 {
			s.figure("first request to all WAITING_PAY", last.at.Sub(res.Start).Seconds(), "s")
		}
		s.figure("accepted", float64(accepted), "orders")
		s.figure("intake", classRate(res, classAccepted), "orders/s")
	}
	r.e2eLatencies(ctx, s, pid, res)
	s.Audit = r.audit(ctx, pid, func(_ pipeline.Report, pa pipeline.ProductAudit) []pipeline.Check {
		waiting := pa.Orders[order.WaitingPay][0]
		return []pipeline.Check{
			ordersCheck(orderCount(pa), accepted, unknown),
			check("every order reached WAITING_PAY", waiting == orderCount(pa), "%d WAITING_PAY of %d orders", waiting, orderCount(pa)),
		}
	})
	return s
}

// waitingPoller samples a product's WAITING_PAY count every E2EPoll until
// it reaches target (set once the load is over) or is stopped.
type waitingPoller struct {
	target  atomic.Int64
	samples []drainSample // read once polled answered
	reached chan struct{}
	stop    chan struct{}
	polled  chan error // the poller's last query error, once it ended
}

// startWaitingPoller starts polling pid's WAITING_PAY orders until ctx ends.
func (r *run) startWaitingPoller(ctx context.Context, pid int64) *waitingPoller {
	w := &waitingPoller{reached: make(chan struct{}), stop: make(chan struct{}), polled: make(chan error, 1)}
	w.target.Store(math.MaxInt64)
	go func() {
		tick := time.NewTicker(r.p.E2EPoll)
		defer tick.Stop()
		var err error
		for {
			n, qerr := r.countWaiting(ctx, pid)
			if qerr != nil {
				err = qerr
			} else {
				w.samples = append(w.samples, drainSample{time.Now(), n})
				if n >= w.target.Load() {
					close(w.reached)
					w.polled <- nil
					return
				}
			}
			select {
			case <-w.stop:
				w.polled <- err
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// await sets the target to accepted and waits until the poller reached it,
// idleWait passed or ctx ended; a timeout and a polling error are noted in s.
func (w *waitingPoller) await(ctx context.Context, s *ScenarioResult, accepted int64, idleWait time.Duration) {
	w.target.Store(accepted)
	wait := time.NewTimer(idleWait)
	var pollErr error
	select {
	case <-w.reached:
		pollErr = <-w.polled
	case <-wait.C:
		close(w.stop)
		pollErr = <-w.polled
		s.Notes = append(s.Notes, fmt.Sprintf("not every accepted order reached WAITING_PAY within %s", idleWait))
	case <-ctx.Done():
		close(w.stop)
		pollErr = <-w.polled
	}
	wait.Stop()
	if pollErr != nil {
		s.Notes = append(s.Notes, "polling WAITING_PAY: "+pollErr.Error())
	}
}

// e2eLatencies reads each order's 202 → WAITING_PAY time from MySQL into
// s's headline latency, with the intake's HTTP latency (res, if any) and
// the drain rate from first to last WAITING_PAY.
func (r *run) e2eLatencies(ctx context.Context, s *ScenarioResult, pid int64, res *loadgen.Result) {
	lat, first, lastAt, n, err := r.waitingLatency(ctx, pid)
	if err != nil {
		s.Notes = append(s.Notes, "reading 202 → WAITING_PAY times: "+err.Error())
		return
	}
	s.HeadlineLatency = lat
	s.Latencies = map[string]loadgen.Summary{"202 → WAITING_PAY (MySQL, ms resolution)": lat}
	if res != nil {
		s.Latencies["intake (HTTP, from scheduled time)"] = res.Latency
	}
	if n > 1 && lastAt.After(first) {
		s.figure("drain rate (first to last WAITING_PAY in MySQL)", float64(n-1)/lastAt.Sub(first).Seconds(), "orders/s")
	}
}

// settled counts pid's orders past PROCESSING.
func (r *run) settled(ctx context.Context, pid int64) (int64, error) {
	if r.env.settled != nil {
		return r.env.settled(ctx, pid)
	}
	return r.countStatus(ctx, []int64{pid}, order.WaitingPay, order.Failed, order.Cancelled, order.Paid)
}

func (r *run) countWaiting(ctx context.Context, pid int64) (int64, error) {
	var n int64
	err := r.env.Store.DB.QueryRowContext(ctx,
		`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = ?`, pid, string(order.WaitingPay)).Scan(&n)
	return n, err
}

// waitingLatency reads, for every WAITING_PAY order of pid, updated_at −
// created_at: the time from the Redis acceptance (the 202) to the
// WAITING_PAY transition. Both are this machine's clocks, millisecond
// resolution.
func (r *run) waitingLatency(ctx context.Context, pid int64) (sum loadgen.Summary, first, last time.Time, n int64, err error) {
	rows, err := r.env.Store.DB.QueryContext(ctx, `SELECT TIMESTAMPDIFF(MICROSECOND, created_at, updated_at), updated_at
		FROM order_info WHERE product_id = ? AND status = ?`, pid, string(order.WaitingPay))
	if err != nil {
		return sum, first, last, 0, err
	}
	defer rows.Close()
	h := loadgen.NewHistogram()
	for rows.Next() {
		var us int64
		var at time.Time
		if err := rows.Scan(&us, &at); err != nil {
			return sum, first, last, 0, err
		}
		loadgen.Record(h, time.Duration(us)*time.Microsecond)
		if n == 0 || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return sum, first, last, 0, err
	}
	return loadgen.Summarize(h), first, last, n, nil
}
