package bench

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/bench/loadgen"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

// Pipeline pauses and restarts the pipeline roles (writer, relay, consumer,
// sweeper) of the system under test, for the drain scenario. The gateway and
// push roles keep running.
type Pipeline interface {
	// Stop stops the running pipeline roles and returns once they drained.
	Stop()
	// Start starts them with the order-lock design ("writer", "batch" or
	// "message", see WriterConfig.LockOrders and
	// ConsumerConfig.PerMessageLock; "": the configured one) and pay timeout
	// (0: the configured one).
	Start(ctx context.Context, design string, payTimeout time.Duration) error
}

// Lock designs the drain scenario compares.
const (
	DesignWriter  = "writer"  // orders stored WAITING_PAY by the writer's own batch transaction
	DesignBatch   = "batch"   // batched consumers, sweeper closes unpaid orders
	DesignMessage = "message" // the previous design: one transaction and one delayed close message per order
)

// mysqlCounters are the server status counters the drain scenario divides by
// the orders drained. They do not drift with the machine's load.
// Row writes are read from the handler counters (Handler_write, _update,
// _delete: rows written, changed, deleted through the storage engine), which
// MariaDB and MySQL both keep; MariaDB 10.11 has no Innodb_rows_*.
// Handler_commit counts storage-engine commits, autocommit statements
// included, where Com_commit counts COMMIT statements.
var mysqlCounters = []string{"Com_commit", "Handler_commit", "Com_insert", "Com_update", "Com_delete", "Com_select",
	"Handler_write", "Handler_update", "Handler_delete"}

// rabbitCounters are RabbitMQ's global message counters (rabbitmq_prometheus
// plugin), summed over queue types.
var rabbitCounters = []string{"rabbitmq_global_messages_received_total", "rabbitmq_global_messages_delivered_total"}

// counters is one reading of every counter; missing ones are absent.
type counters map[string]float64

func (r *run) readCounters(ctx context.Context) (counters, []string) {
	out := counters{}
	var notes []string
	args := make([]any, len(mysqlCounters))
	for i, n := range mysqlCounters {
		args[i] = n
	}
	rows, err := r.env.Store.DB.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN (`+strings.TrimSuffix(strings.Repeat("?,", len(args)), ",")+`)`, args...)
	if err != nil {
		notes = append(notes, "MySQL status counters: "+err.Error())
	} else {
		for rows.Next() {
			var name string
			var v sql.NullFloat64
			if rows.Scan(&name, &v) == nil {
				out[name] = v.Float64
			}
		}
		if err := rows.Err(); err != nil {
			notes = append(notes, "MySQL status counters: "+err.Error())
		}
		rows.Close()
	}
	if r.env.RabbitMQMetricsURL != "" {
		if err := readRabbit(ctx, r.env.RabbitMQMetricsURL, out); err != nil {
			notes = append(notes, "RabbitMQ counters ("+r.env.RabbitMQMetricsURL+", plugin rabbitmq_prometheus; `make bench-services` enables it): "+err.Error())
		}
	}
	return out, notes
}

func readRabbit(ctx context.Context, url string, out counters) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range rabbitCounters {
			if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
				continue
			}
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				out[name] += v
				found++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if found == 0 {
		return fmt.Errorf("no %s series", strings.Join(rabbitCounters, ", "))
	}
	return nil
}

// costNames are the rows of the cost table, in order: the counter and how it
// is shown.
var costNames = []struct{ key, label string }{
	{"Com_commit", "MySQL COMMIT statements (Com_commit)"},
	{"Handler_commit", "MySQL engine commits, autocommit included (Handler_commit)"},
	{"statements", "MySQL statements (insert+update+delete+select)"},
	{"Com_insert", "MySQL INSERTs"},
	{"Com_update", "MySQL UPDATEs"},
	{"Com_delete", "MySQL DELETEs"},
	{"Com_select", "MySQL SELECTs (bench's own polls excluded)"},
	{"rows", "row writes (Handler_write+_update+_delete)"},
	{"Handler_write", "rows inserted (Handler_write)"},
	{"Handler_update", "rows updated (Handler_update)"},
	{"Handler_delete", "rows deleted (Handler_delete)"},
	{"rabbitmq_global_messages_received_total", "RabbitMQ messages published"},
	{"rabbitmq_global_messages_delivered_total", "RabbitMQ messages delivered"},
}

// perOrder divides the deltas b − a by n, with the derived sums; ownSelects
// of the bench's own queries are taken off Com_select.
func perOrder(a, b counters, n int64, ownSelects int64) map[string]float64 {
	out := map[string]float64{}
	if n <= 0 {
		return out
	}
	d := func(k string) (float64, bool) {
		x, okA := a[k]
		y, okB := b[k]
		return y - x, okA && okB
	}
	for _, k := range append(append([]string{}, mysqlCounters...), rabbitCounters...) {
		if v, ok := d(k); ok {
			if k == "Com_select" {
				v -= float64(ownSelects)
			}
			out[k] = v / float64(n)
		}
	}
	if _, ok := out["Com_insert"]; ok {
		out["statements"] = out["Com_insert"] + out["Com_update"] + out["Com_delete"] + out["Com_select"]
		out["rows"] = out["Handler_write"] + out["Handler_update"] + out["Handler_delete"]
	}
	return out
}

// redisFootprint counts the Redis keys of product pid (every key under its
// shards' hash tags: stock, intake stream, request and user records, pending
// orders, release markers) and their memory (MEMORY USAGE, pipelined). Only
// the product's own keys: server-wide figures move with other scenarios'
// keys expiring or being dropped meanwhile.
func (r *run) redisFootprint(ctx context.Context, pid int64) (bytes, keys int64, err error) {
	pattern := lua.ProductKeysPattern(pid)
	var cursor uint64
	for {
		batch, next, err := r.env.Redis.Scan(ctx, cursor, pattern, 2000).Result()
		if err != nil {
			return 0, 0, err
		}
		if len(batch) > 0 {
			pipe := r.env.Redis.Pipeline()
			cmds := make([]*redis.IntCmd, len(batch))
			for i, k := range batch {
				cmds[i] = pipe.MemoryUsage(ctx, k)
			}
			_, _ = pipe.Exec(ctx) // per-command errors: a key gone meanwhile counts 0
			for _, c := range cmds {
				if n, err := c.Result(); err == nil {
					bytes += n
					keys++
				}
			}
		}
		if cursor = next; cursor == 0 {
			return bytes, keys, nil
		}
	}
}

// drainRun is what one design did.
type drainRun struct {
	design            string
	accepted          int64
	rate, wallRate    float64 // 10–90 % slope, and accepted / (start → last settled)
	toLast            time.Duration
	failed            int64
	drainCost         map[string]float64
	closeCost         map[string]float64
	closeDelay        loadgen.Summary
	closed            int64
	memDuring         float64 // Redis bytes per accepted order before the drain
	memAfter          float64 // … after it
	keysDuring        float64
	keysAfter         float64
	closesOverlapped  bool
	closeIncomplete   string
	pendingAfterDrain int64
}

// runDrain accepts DrainOrders reservations with the pipeline roles stopped,
// then starts them with each design of DrainDesigns in turn and measures how
// fast the orders reach WAITING_PAY, what each order cost in MySQL
// statements, commits and row writes and in RabbitMQ messages (server
// counters, divided by the orders), Redis bytes per order, and — once the
// pay timeout passes — how long after its deadline each unpaid order was
// closed. Between designs the pipeline restarts; at the end the configured
// pipeline runs again.
func runDrain(ctx context.Context, r *run, t *target) *ScenarioResult {
	s := &ScenarioResult{}
	if r.env.Pipeline == nil {
		return s.fail(fmt.Errorf("the drain scenario needs the pipeline roles in the bench process (run without --url)"))
	}
	defer func() {
		r.env.Pipeline.Stop()
		if err := r.env.Pipeline.Start(context.WithoutCancel(ctx), "", 0); err != nil {
			s.fail(fmt.Errorf("restart the pipeline: %w", err))
		}
	}()
	var runs []*drainRun
	var pids []int64
	for _, design := range r.p.DrainDesigns {
		dr, pid, err := r.drainOnce(ctx, t, design, s)
		if pid > 0 {
			pids = append(pids, pid)
		}
		if err != nil {
			return s.fail(fmt.Errorf("%s design: %w", design, err))
		}
		runs = append(runs, dr)
	}
	r.addMySQLCeiling(ctx, s, runs) // mysqlceiling.go
	if len(pids) > 0 {
		s.ProductID = pids[len(pids)-1]
	}
	s.Tables = append(s.Tables, drainCostTable(runs), drainTable(runs, s))
	drainFigures(runs, s)
	for i, pid := range pids {
		s.Notes = append(s.Notes, fmt.Sprintf("product %d: the %s design", pid, runs[min(i, len(runs)-1)].design))
	}
	s.Audit = r.drainAudit(ctx, pids, runs)
	return s
}

// drainCostTable is the cost per order of every design, drained and closed.
func drainCostTable(runs []*drainRun) Table {
	cols := []string{"per order"}
	for _, dr := range runs {
		cols = append(cols, dr.design+" (drain)")
	}
	for _, dr := range runs {
		cols = append(cols, dr.design+" (close)")
	}
	tbl := Table{Title: "Cost per order, from server counters (MySQL SHOW GLOBAL STATUS, RabbitMQ rabbitmq_global_messages_*), deltas divided by the orders (the close column: per order closed)", Header: cols}
	for _, c := range costNames {
		row := []string{c.label}
		any := false
		for _, m := range append(costMaps(runs, true), costMaps(runs, false)...) {
			if v, ok := m[c.key]; ok {
				row = append(row, fmt.Sprintf("%.3f", v))
				any = true
			} else {
				row = append(row, "n/a")
			}
		}
		if any {
			tbl.Rows = append(tbl.Rows, row)
		}
	}
	return tbl
}

// drainTable is the drain and close of every design, with the notes on
// what overlapped or did not finish.
func drainTable(runs []*drainRun, s *ScenarioResult) Table {
	rt := Table{Title: "Drain and close", Header: []string{"design", "orders", "drain orders/s (10–90 %)", "start → last orders/s", "time to last", "FAILED",
		"Redis B/order (product's keys) before drain", "after", "Redis keys/order before", "after", "close delay p50", "p95", "p99", "max"}}
	for _, dr := range runs {
		cd := dr.closeDelay
		rt.Rows = append(rt.Rows, []string{dr.design, strconv.FormatInt(dr.accepted, 10), fmtNum(dr.rate), fmtNum(dr.wallRate), dr.toLast.Round(10 * time.Millisecond).String(),
			strconv.FormatInt(dr.failed, 10), fmt.Sprintf("%.0f", dr.memDuring), fmt.Sprintf("%.0f", dr.memAfter),
			fmt.Sprintf("%.2f", dr.keysDuring), fmt.Sprintf("%.2f", dr.keysAfter),
			fmtMs(cd.P50), fmtMs(cd.P95), fmtMs(cd.P99), fmtMs(cd.Max)})
		if dr.closesOverlapped {
			s.Notes = append(s.Notes, dr.design+": the drain outlasted the pay timeout, so closes overlapped the drain and are counted in its cost")
		}
		if dr.pendingAfterDrain > 0 {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: %d outbox rows were still unsent when the drain's cost was read (idle wait ran out): their publishes are missing from it",
				dr.design, dr.pendingAfterDrain))
		}
		if dr.closeIncomplete != "" {
			s.Notes = append(s.Notes, dr.design+": "+dr.closeIncomplete)
		}
	}
	return rt
}

// drainFigures names the figures of every design: drain rate, its ratio to
// the batch design of the same run, commits, statements, row writes and
// RabbitMQ messages (published + delivered) per drained order, close delay;
// the headline is the last design's drain rate.
func drainFigures(runs []*drainRun, s *ScenarioResult) {
	var batchRate float64
	for _, dr := range runs {
		if dr.design == DesignBatch {
			batchRate = dr.rate
		}
	}
	for _, dr := range runs {
		s.figure(dr.design+": drain rate", dr.rate, "orders/s")
		if batchRate > 0 && dr.design != DesignBatch {
			s.figure(dr.design+": drain rate / batch design's", dr.rate/batchRate, "×")
		}
		if v, ok := dr.drainCost["Com_commit"]; ok {
			s.figure(dr.design+": MySQL commits per drained order", v, "")
			s.Notes = append(s.Notes, fmt.Sprintf("%s: %.4f MySQL COMMITs and %.3f statements per drained order", dr.design, v, dr.drainCost["statements"]))
		}
		if v, ok := dr.drainCost["statements"]; ok {
			s.figure(dr.design+": MySQL statements per drained order", v, "")
		}
		if v, ok := dr.drainCost["rows"]; ok {
			s.figure(dr.design+": row writes per drained order", v, "")
		}
		pub, okP := dr.drainCost[rabbitCounters[0]]
		del, okD := dr.drainCost[rabbitCounters[1]]
		if okP && okD {
			s.figure(dr.design+": RabbitMQ messages per drained order", pub+del, "")
		}
		s.figure(dr.design+": close delay p95", dr.closeDelay.P95, "ms")
	}
	last := runs[len(runs)-1]
	s.Headline = Figure{Name: "drain rate (" + last.design + "; p50–p99: its close delay)", Value: last.rate, Unit: "orders/s"}
	s.HeadlineLatency = last.closeDelay
	s.Latencies = map[string]loadgen.Summary{}
	for _, dr := range runs {
		s.Latencies[dr.design+": pay deadline → CANCELLED (MySQL, ms resolution)"] = dr.closeDelay
	}
}

// drainAudit audits every product of the scenario; one Audit holds them all.
func (r *run) drainAudit(ctx context.Context, pids []int64, runs []*drainRun) *Audit {
	a := &Audit{Pass: true, Idle: true, Orders: map[string]int64{}}
	for i, pid := range pids {
		acc := runs[min(i, len(runs)-1)].accepted
		pa := r.audit(ctx, pid, func(_ pipeline.Report, pa pipeline.ProductAudit) []pipeline.Check {
			c := pa.Orders[order.Cancelled][0]
			return []pipeline.Check{
				ordersCheck(orderCount(pa), acc, 0),
				check(fmt.Sprintf("product %d: every unpaid order closed at its deadline", pid), c == orderCount(pa), "%d CANCELLED of %d orders", c, orderCount(pa)),
			}
		})
		a.Pass = a.Pass && pa.Pass
		a.Idle = a.Idle && pa.Idle
		a.IdleAfter += pa.IdleAfter
		for k, v := range pa.Orders {
			a.Orders[k] += v
		}
		a.Checks = append(a.Checks, pa.Checks...)
		if pa.Error != "" {
			a.Error = pa.Error
		}
	}
	return a
}

func costMaps(runs []*drainRun, drain bool) []map[string]float64 {
	out := make([]map[string]float64, len(runs))
	for i, dr := range runs {
		out[i] = dr.closeCost
		if drain {
			out[i] = dr.drainCost
		}
	}
	return out
}

// drainOnce is one design's run of the drain scenario: accept with the
// pipeline stopped, drain with design, then wait for the close.
func (r *run) drainOnce(ctx context.Context, t *target, design string, s *ScenarioResult) (*drainRun, int64, error) {
	dr := &drainRun{design: design}
	r.env.Pipeline.Stop()
	pid, err := r.createProduct(ctx, t, Drain+" "+design, r.p.DrainOrders, 0)
	if err != nil {
		return nil, 0, err
	}
	mem0, keys0, err := r.redisFootprint(ctx, pid)
	if err != nil {
		return nil, pid, err
	}
	if err := r.acceptStopped(ctx, t, dr, pid, s); err != nil {
		return nil, pid, err
	}
	if mem, keys, err := r.redisFootprint(ctx, pid); err == nil {
		dr.memDuring = float64(mem-mem0) / float64(dr.accepted)
		dr.keysDuring = float64(keys-keys0) / float64(dr.accepted)
	}
	c1, err := r.drainMeasured(ctx, dr, pid, s)
	if err != nil {
		return nil, pid, err
	}
	if mem, keys, err := r.redisFootprint(ctx, pid); err == nil {
		dr.memAfter = float64(mem-mem0) / float64(dr.accepted)
		dr.keysAfter = float64(keys-keys0) / float64(dr.accepted)
	}
	r.logf("   %s design: %d orders past PROCESSING in %s (%s orders/s), waiting for their pay deadline (%s) to measure the close",
		design, dr.accepted, dr.toLast.Round(time.Millisecond), fmtNum(dr.rate), r.p.DrainPayTimeout)
	if err := r.closeMeasured(ctx, dr, pid, c1); err != nil {
		return nil, pid, err
	}
	r.logf("   %s design: %d closed, pay deadline → CANCELLED p50 %s p95 %s max %s", design, dr.closed,
		fmtMs(dr.closeDelay.P50), fmtMs(dr.closeDelay.P95), fmtMs(dr.closeDelay.Max))
	return dr, pid, nil
}

// acceptStopped accepts DrainOrders reservations of pid at DrainRate with
// the pipeline stopped and records how many were accepted.
func (r *run) acceptStopped(ctx context.Context, t *target, dr *drainRun, pid int64, s *ScenarioResult) error {
	p := r.p
	var acc outcomes
	cfg := r.loadConfig(t)
	cfg.Rate = p.DrainRate
	cfg.Duration = time.Duration(float64(p.DrainOrders) / p.DrainRate * float64(time.Second))
	nUsers := int64(len(r.users.ids))
	cfg.Build = r.orderBuilder(pid, r.requestPrefix(t, "dr"+dr.design[:1]), func(i int64) int { return int(i % nUsers) }, func(i int64) int64 { return i })
	cfg.Observe = acc.observe
	r.logf("   %s design: accepting %d reservations at %s/s with the pipeline stopped", dr.design, p.DrainOrders, fmtNum(cfg.Rate))
	res, err := loadgen.Run(ctx, cfg)
	if res != nil {
		s.addPhase(dr.design+": intake (pipeline stopped)", cfg.Rate, res)
	}
	if err != nil {
		return err
	}
	dr.accepted, _ = acc.counts()
	if dr.accepted == 0 {
		return fmt.Errorf("no reservation accepted")
	}
	return nil
}

// drainMeasured starts the pipeline with dr's design, waits until every
// accepted order of pid is past PROCESSING and its status events are sent,
// and records the drain's rates and cost per order. It returns the counters
// read at its end.
func (r *run) drainMeasured(ctx context.Context, dr *drainRun, pid int64, s *ScenarioResult) (counters, error) {
	c0, notes := r.readCounters(ctx)
	s.Notes = appendNew(s.Notes, notes...)
	start := time.Now()
	if err := r.env.Pipeline.Start(ctx, dr.design, r.p.DrainPayTimeout); err != nil {
		return nil, err
	}
	r.logf("   %s design: pipeline started, draining", dr.design)
	deadline := start.Add(r.env.IdleWait)
	samples, own, err := r.waitPastProcessing(ctx, pid, dr.accepted, deadline)
	if err != nil {
		return nil, err
	}
	lastAt := samples[len(samples)-1].at
	dr.toLast = lastAt.Sub(start)
	dr.rate = drainRate(samples, dr.accepted)
	dr.wallRate = float64(dr.accepted) / dr.toLast.Seconds()
	// Until every status event of the drain is published and delivered.
	n, polls := r.waitOutboxSent(ctx, pid, deadline)
	dr.pendingAfterDrain = n
	own += polls
	sleepCtx(ctx, time.Second) // deliveries of the last published events
	if n, err := r.countStatus(ctx, pid, order.Cancelled); err == nil && n > 0 {
		dr.closesOverlapped = true
	}
	dr.failed, _ = r.countStatus(ctx, pid, order.Failed)
	own += 2
	c1, _ := r.readCounters(ctx)
	dr.drainCost = perOrder(c0, c1, dr.accepted, own)
	return c1, nil
}

// waitPastProcessing samples how many of pid's orders are past PROCESSING
// every 100 ms until all accepted are, or deadline. own counts its SELECTs.
func (r *run) waitPastProcessing(ctx context.Context, pid, accepted int64, deadline time.Time) (samples []drainSample, own int64, err error) {
	for {
		n, err := r.countStatus(ctx, pid, order.WaitingPay, order.Failed, order.Cancelled)
		own++
		if err != nil {
			return nil, own, err
		}
		samples = append(samples, drainSample{time.Now(), n})
		if n >= accepted {
			return samples, own, nil
		}
		if time.Now().After(deadline) {
			return nil, own, fmt.Errorf("%d of %d orders past PROCESSING after %s", n, accepted, r.env.IdleWait)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return nil, own, ctx.Err()
		}
	}
}

// waitOutboxSent waits until pid has no unsent outbox row, or deadline; it
// returns the rows still unsent and its polls.
func (r *run) waitOutboxSent(ctx context.Context, pid int64, deadline time.Time) (pending, polls int64) {
	for {
		n, err := r.env.Store.PendingOutboxFor(ctx, []int64{pid})
		polls++
		if err != nil || n == 0 || time.Now().After(deadline) {
			return n, polls
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// closeMeasured waits until every locked order of pid is CANCELLED (nobody
// pays) or the pay timeout + IdleWait passed, and records the close's cost
// per order from c1 on and the delays past the deadline.
func (r *run) closeMeasured(ctx context.Context, dr *drainRun, pid int64, c1 counters) error {
	var own int64
	closeBy := time.Now().Add(r.p.DrainPayTimeout + r.env.IdleWait)
	for {
		n, err := r.countStatus(ctx, pid, order.Cancelled)
		own++
		if err != nil {
			return err
		}
		if n >= dr.accepted-dr.failed {
			break
		}
		if time.Now().After(closeBy) {
			dr.closeIncomplete = fmt.Sprintf("%d of %d orders closed within the pay timeout + %s", n, dr.accepted-dr.failed, r.env.IdleWait)
			break
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	_, polls := r.waitOutboxSent(ctx, pid, closeBy)
	own += polls
	sleepCtx(ctx, time.Second)
	c2, _ := r.readCounters(ctx)
	dr.closed, _ = r.countStatus(ctx, pid, order.Cancelled)
	own++
	dr.closeCost = perOrder(c1, c2, max(dr.closed, 1), own)
	var err error
	dr.closeDelay, err = r.closeDelays(ctx, pid)
	return err
}

func appendNew(dst []string, xs ...string) []string {
	for _, x := range xs {
		seen := false
		for _, d := range dst {
			seen = seen || d == x
		}
		if !seen {
			dst = append(dst, x)
		}
	}
	return dst
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// countStatus counts pid's orders in any of statuses.
func (r *run) countStatus(ctx context.Context, pid int64, statuses ...order.Status) (int64, error) {
	args := []any{pid}
	for _, st := range statuses {
		args = append(args, string(st))
	}
	var n int64
	err := r.env.Store.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(statuses)), ",")+`)`, args...).Scan(&n)
	return n, err
}

// closeDelays reads, for every CANCELLED order of pid, updated_at −
// pay_deadline: how long after its deadline it was closed.
func (r *run) closeDelays(ctx context.Context, pid int64) (loadgen.Summary, error) {
	rows, err := r.env.Store.DB.QueryContext(ctx, `SELECT GREATEST(0, TIMESTAMPDIFF(MICROSECOND, pay_deadline, updated_at))
		FROM order_info WHERE product_id = ? AND status = 'CANCELLED' AND pay_deadline IS NOT NULL`, pid)
	if err != nil {
		return loadgen.Summary{}, err
	}
	defer rows.Close()
	h := loadgen.NewHistogram()
	for rows.Next() {
		var us int64
		if err := rows.Scan(&us); err != nil {
			return loadgen.Summary{}, err
		}
		loadgen.Record(h, time.Duration(us)*time.Microsecond)
	}
	if err := rows.Err(); err != nil {
		return loadgen.Summary{}, err
	}
	return loadgen.Summarize(h), nil
}
