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
	"github.com/valyala/fasthttp"

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
	// Start starts them with the order-lock design ("writer" or "batch",
	// see WriterConfig.LockOrders; "": the configured one) and pay timeout
	// (0: the configured one).
	Start(ctx context.Context, design string, payTimeout time.Duration) error
}

// Lock designs the drain scenario compares.
const (
	DesignWriter = "writer" // orders stored WAITING_PAY by the writer's own batch transaction
	DesignBatch  = "batch"  // batched consumers, sweeper closes unpaid orders
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

// drainRun is what one design did over its products.
type drainRun struct {
	design            string
	pids              []int64 // the products the orders were spread over
	accepted          int64
	rate, wallRate    float64 // 10–90 % slope, and accepted / (start → last settled)
	toLast            time.Duration
	failed            int64
	drainCost         map[string]float64
	closeCost         map[string]float64
	drainCPU          map[string]float64 // process → CPU ms per 1,000 drained orders
	closeCPU          map[string]float64 // … per 1,000 closed orders
	closeDelay        loadgen.Summary
	closeRate         float64 // closed / (last close − first deadline)
	closed            int64
	memDuring         float64 // Redis bytes per accepted order before the drain
	memAfter          float64 // … after it
	keysDuring        float64
	keysAfter         float64
	closesOverlapped  bool
	closeIncomplete   string
	pendingAfterDrain int64
}

// label names the run: its design, and its product count when not one.
func (dr *drainRun) label() string {
	if len(dr.pids) == 1 {
		return dr.design
	}
	return fmt.Sprintf("%s, %d products", dr.design, len(dr.pids))
}

// runDrain accepts DrainOrders reservations with the pipeline roles stopped,
// then starts them with each design of DrainDesigns in turn and measures how
// fast the orders reach WAITING_PAY, what each order cost in MySQL
// statements, commits and row writes, in RabbitMQ messages (server
// counters, divided by the orders) and in CPU time of each process, Redis
// bytes per order, and — once the pay timeout passes — how long after its
// deadline each unpaid order was closed and at what rate. Each design runs
// once per product count of DrainProducts: the orders spread round robin
// over that many products (1: one hot product). Between runs the pipeline
// restarts; at the end the configured pipeline runs again.
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
	for _, design := range r.p.DrainDesigns {
		for _, n := range r.p.DrainProducts {
			dr, err := r.drainOnce(ctx, t, design, n, s)
			if err != nil {
				return s.fail(fmt.Errorf("%s design, %d products: %w", design, n, err))
			}
			runs = append(runs, dr)
		}
	}
	r.addMySQLCeiling(ctx, s, runs) // mysqlceiling.go
	s.ProductID = runs[len(runs)-1].pids[0]
	s.Tables = append(s.Tables, drainCostTable(runs), drainCPUTable(runs), drainTable(runs, s))
	drainFigures(runs, s)
	for _, dr := range runs {
		s.Notes = append(s.Notes, fmt.Sprintf("products %v: %s", dr.pids, dr.label()))
	}
	s.Audit = r.drainAudit(ctx, runs)
	return s
}

// drainCostTable is the cost per order of every design, drained and closed.
func drainCostTable(runs []*drainRun) Table {
	rows := make([][2]string, len(costNames))
	for i, c := range costNames {
		rows[i] = [2]string{c.key, c.label}
	}
	return perRunTable("Cost per order, from server counters (MySQL SHOW GLOBAL STATUS, RabbitMQ rabbitmq_global_messages_*), deltas divided by the orders (the close column: per order closed)",
		"per order", "%.3f", rows, runs, func(dr *drainRun) map[string]float64 { return dr.drainCost },
		func(dr *drainRun) map[string]float64 { return dr.closeCost })
}

// drainCPUTable is the CPU time each process spent per 1,000 orders drained
// and closed (cpu.go): a cost that drifts far less with the machine's load
// than the rates.
func drainCPUTable(runs []*drainRun) Table {
	var rows [][2]string
	for _, name := range append([]string{"stampede"}, cpuServers...) {
		rows = append(rows, [2]string{name, name})
	}
	return perRunTable("CPU time per 1,000 orders, by process (user + system from /proc; the bench process runs every role and the load generator)",
		"CPU ms per 1,000 orders", "%.0f", rows, runs, func(dr *drainRun) map[string]float64 { return dr.drainCPU },
		func(dr *drainRun) map[string]float64 { return dr.closeCPU })
}

// perRunTable has one row per {key, label} of rows that some run has, and
// a column per run's drain (drain's map) then per run's close (closed's),
// each value formatted with format; "n/a" where a run lacks the key.
func perRunTable(title, first, format string, rows [][2]string, runs []*drainRun, drain, closed func(*drainRun) map[string]float64) Table {
	cols := []string{first}
	var maps []map[string]float64
	for _, dr := range runs {
		cols = append(cols, dr.label()+" (drain)")
		maps = append(maps, drain(dr))
	}
	for _, dr := range runs {
		cols = append(cols, dr.label()+" (close)")
		maps = append(maps, closed(dr))
	}
	tbl := Table{Title: title, Header: cols}
	for _, r := range rows {
		row := []string{r[1]}
		any := false
		for _, m := range maps {
			if v, ok := m[r[0]]; ok {
				row = append(row, fmt.Sprintf(format, v))
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
	rt := Table{Title: "Drain and close", Header: []string{"design", "products", "orders", "drain orders/s (10–90 %)", "start → last orders/s", "time to last", "FAILED",
		"Redis B/order (products' keys) before drain", "after", "Redis keys/order before", "after", "close orders/s (first deadline → last close)",
		"close delay p50", "p95", "p99", "max"}}
	for _, dr := range runs {
		cd := dr.closeDelay
		rt.Rows = append(rt.Rows, []string{dr.design, strconv.Itoa(len(dr.pids)), strconv.FormatInt(dr.accepted, 10), fmtNum(dr.rate), fmtNum(dr.wallRate),
			dr.toLast.Round(10 * time.Millisecond).String(), strconv.FormatInt(dr.failed, 10), fmt.Sprintf("%.0f", dr.memDuring), fmt.Sprintf("%.0f", dr.memAfter),
			fmt.Sprintf("%.2f", dr.keysDuring), fmt.Sprintf("%.2f", dr.keysAfter), fmtNum(dr.closeRate),
			fmtMs(cd.P50), fmtMs(cd.P95), fmtMs(cd.P99), fmtMs(cd.Max)})
		if dr.closesOverlapped {
			s.Notes = append(s.Notes, dr.label()+": the drain outlasted the pay timeout, so closes overlapped the drain and are counted in its cost")
		}
		if dr.pendingAfterDrain > 0 {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: %d outbox rows were still unsent when the drain's cost was read (idle wait ran out): their publishes are missing from it",
				dr.label(), dr.pendingAfterDrain))
		}
		if dr.closeIncomplete != "" {
			s.Notes = append(s.Notes, dr.label()+": "+dr.closeIncomplete)
		}
	}
	return rt
}

// drainFigures names the figures of every run: drain rate, its ratio to
// the batch design of the same run and product count, commits, statements,
// row writes and RabbitMQ messages (published + delivered) per drained
// order, close rate and its ratio to the drain rate, close delay; the
// headline is the last run's drain rate.
func drainFigures(runs []*drainRun, s *ScenarioResult) {
	batchRate := map[int]float64{}
	for _, dr := range runs {
		if dr.design == DesignBatch {
			batchRate[len(dr.pids)] = dr.rate
		}
	}
	for _, dr := range runs {
		l := dr.label()
		s.figure(l+": drain rate", dr.rate, "orders/s")
		if b := batchRate[len(dr.pids)]; b > 0 && dr.design != DesignBatch {
			s.figure(l+": drain rate / batch design's", dr.rate/b, "×")
		}
		if v, ok := dr.drainCost["Com_commit"]; ok {
			s.figure(l+": MySQL commits per drained order", v, "")
			s.Notes = append(s.Notes, fmt.Sprintf("%s: %.4f MySQL COMMITs and %.3f statements per drained order", l, v, dr.drainCost["statements"]))
		}
		if v, ok := dr.drainCost["statements"]; ok {
			s.figure(l+": MySQL statements per drained order", v, "")
		}
		if v, ok := dr.drainCost["rows"]; ok {
			s.figure(l+": row writes per drained order", v, "")
		}
		if v, ok := dr.closeCost["statements"]; ok {
			s.figure(l+": MySQL statements per closed order", v, "")
		}
		if v, ok := dr.closeCost["Handler_commit"]; ok {
			s.figure(l+": MySQL engine commits per closed order", v, "")
		}
		if v, ok := dr.closeCost["rows"]; ok {
			s.figure(l+": row writes per closed order", v, "")
		}
		pub, okP := dr.drainCost[rabbitCounters[0]]
		del, okD := dr.drainCost[rabbitCounters[1]]
		if okP && okD {
			s.figure(l+": RabbitMQ messages per drained order", pub+del, "")
		}
		s.figure(l+": close rate", dr.closeRate, "orders/s")
		if dr.rate > 0 {
			s.figure(l+": close rate / drain rate", dr.closeRate/dr.rate, "×")
		}
		s.figure(l+": close delay p50", dr.closeDelay.P50, "ms")
		s.figure(l+": close delay p95", dr.closeDelay.P95, "ms")
		s.figure(l+": close delay p99", dr.closeDelay.P99, "ms")
	}
	last := runs[len(runs)-1]
	s.Headline = Figure{Name: "drain rate (" + last.label() + "; p50–p99: its close delay)", Value: last.rate, Unit: "orders/s"}
	s.HeadlineLatency = last.closeDelay
	s.Latencies = map[string]loadgen.Summary{}
	for _, dr := range runs {
		s.Latencies[dr.label()+": pay deadline → CANCELLED (MySQL, ms resolution)"] = dr.closeDelay
	}
}

// drainAudit audits every product of the scenario; one Audit holds them all.
// Each run's orders are counted over its products.
func (r *run) drainAudit(ctx context.Context, runs []*drainRun) *Audit {
	a := &Audit{Pass: true, Idle: true, Orders: map[string]int64{}}
	for _, dr := range runs {
		var orders, cancelled int64
		for _, pid := range dr.pids {
			pa := r.audit(ctx, pid, func(_ pipeline.Report, pa pipeline.ProductAudit) []pipeline.Check {
				orders += orderCount(pa)
				cancelled += pa.Orders[order.Cancelled][0]
				return nil
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
		extra := []pipeline.Check{
			ordersCheck(orders, dr.accepted, 0),
			check(fmt.Sprintf("%s (products %v): every unpaid order closed at its deadline", dr.label(), dr.pids), cancelled == orders,
				"%d CANCELLED of %d orders", cancelled, orders),
		}
		for _, c := range extra {
			a.Pass = a.Pass && c.OK
		}
		a.Checks = append(a.Checks, extra...)
	}
	return a
}

// drainOnce is one design's run of the drain scenario over n products:
// accept with the pipeline stopped, drain with design, then wait for the
// close. The returned run holds the products created, also on an error.
func (r *run) drainOnce(ctx context.Context, t *target, design string, n int, s *ScenarioResult) (*drainRun, error) {
	dr := &drainRun{design: design}
	r.env.Pipeline.Stop()
	units := (r.p.DrainOrders + int64(n) - 1) / int64(n)
	for i := range n {
		pid, err := r.createProduct(ctx, t, fmt.Sprintf("%s %s %d/%d", Drain, design, i+1, n), units, 0)
		if err != nil {
			return dr, err
		}
		dr.pids = append(dr.pids, pid)
	}
	mem0, keys0, err := r.redisFootprints(ctx, dr.pids)
	if err != nil {
		return dr, err
	}
	if err := r.acceptStopped(ctx, t, dr, s); err != nil {
		return dr, err
	}
	if mem, keys, err := r.redisFootprints(ctx, dr.pids); err == nil {
		dr.memDuring = float64(mem-mem0) / float64(dr.accepted)
		dr.keysDuring = float64(keys-keys0) / float64(dr.accepted)
	}
	c1, cpu1, err := r.drainMeasured(ctx, dr, s)
	if err != nil {
		return dr, err
	}
	if mem, keys, err := r.redisFootprints(ctx, dr.pids); err == nil {
		dr.memAfter = float64(mem-mem0) / float64(dr.accepted)
		dr.keysAfter = float64(keys-keys0) / float64(dr.accepted)
	}
	r.logf("   %s: %d orders past PROCESSING in %s (%s orders/s), waiting for their pay deadline (%s) to measure the close",
		dr.label(), dr.accepted, dr.toLast.Round(time.Millisecond), fmtNum(dr.rate), r.p.DrainPayTimeout)
	if err := r.closeMeasured(ctx, dr, c1, cpu1); err != nil {
		return dr, err
	}
	r.logf("   %s: %d closed at %s orders/s, pay deadline → CANCELLED p50 %s p95 %s p99 %s max %s", dr.label(), dr.closed, fmtNum(dr.closeRate),
		fmtMs(dr.closeDelay.P50), fmtMs(dr.closeDelay.P95), fmtMs(dr.closeDelay.P99), fmtMs(dr.closeDelay.Max))
	return dr, nil
}

// redisFootprints sums redisFootprint over pids.
func (r *run) redisFootprints(ctx context.Context, pids []int64) (bytes, keys int64, err error) {
	for _, pid := range pids {
		b, k, err := r.redisFootprint(ctx, pid)
		if err != nil {
			return 0, 0, err
		}
		bytes, keys = bytes+b, keys+k
	}
	return bytes, keys, nil
}

// acceptStopped accepts DrainOrders reservations at DrainRate with the
// pipeline stopped, round robin over dr's products, and records how many
// were accepted.
func (r *run) acceptStopped(ctx context.Context, t *target, dr *drainRun, s *ScenarioResult) error {
	p := r.p
	var acc outcomes
	cfg := r.loadConfig(t)
	cfg.Rate = p.DrainRate
	cfg.Duration = time.Duration(float64(p.DrainOrders) / p.DrainRate * float64(time.Second))
	nUsers := int64(len(r.users.ids))
	builders := make([]func(int64, *fasthttp.Request), len(dr.pids))
	for k, pid := range dr.pids {
		builders[k] = r.orderBuilder(pid, r.requestPrefix(t, "dr"+dr.design[:1]+strconv.Itoa(k)), func(i int64) int { return int(i % nUsers) },
			func(i int64) int64 { return i })
	}
	n := int64(len(builders))
	cfg.Build = func(i int64, req *fasthttp.Request) { builders[i%n](i, req) }
	cfg.Observe = acc.observe
	r.logf("   %s: accepting %d reservations at %s/s with the pipeline stopped", dr.label(), p.DrainOrders, fmtNum(cfg.Rate))
	res, err := loadgen.Run(ctx, cfg)
	if res != nil {
		s.addPhase(dr.label()+": intake (pipeline stopped)", cfg.Rate, res)
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
// accepted order of its products is past PROCESSING and their status events
// are sent, and records the drain's rates and cost per order (server
// counters and CPU). It returns the counters and CPU times read at its end.
func (r *run) drainMeasured(ctx context.Context, dr *drainRun, s *ScenarioResult) (counters, []float64, error) {
	c0, notes := r.readCounters(ctx)
	s.Notes = appendNew(s.Notes, notes...)
	meter := r.cpuMeter()
	cpu0 := meter.sample()
	start := time.Now()
	if err := r.env.Pipeline.Start(ctx, dr.design, r.p.DrainPayTimeout); err != nil {
		return nil, nil, err
	}
	r.logf("   %s: pipeline started, draining", dr.label())
	deadline := start.Add(r.env.IdleWait)
	samples, own, err := r.waitPastProcessing(ctx, dr.pids, dr.accepted, deadline)
	if err != nil {
		return nil, nil, err
	}
	lastAt := samples[len(samples)-1].at
	dr.toLast = lastAt.Sub(start)
	dr.rate = drainRate(samples, dr.accepted)
	dr.wallRate = float64(dr.accepted) / dr.toLast.Seconds()
	// Until every status event of the drain is published and delivered.
	n, polls := r.waitOutboxSent(ctx, dr.pids, deadline)
	dr.pendingAfterDrain = n
	own += polls
	sleepCtx(ctx, time.Second) // deliveries of the last published events
	if n, err := r.countStatus(ctx, dr.pids, order.Cancelled); err == nil && n > 0 {
		dr.closesOverlapped = true
	}
	dr.failed, _ = r.countStatus(ctx, dr.pids, order.Failed)
	own += 2
	c1, _ := r.readCounters(ctx)
	cpu1 := meter.sample()
	dr.drainCost = perOrder(c0, c1, dr.accepted, own)
	dr.drainCPU = cpuPerThousand(meter, cpu0, cpu1, dr.accepted)
	return c1, cpu1, nil
}

// cpuPerThousand is each process's CPU time between samples a and b, in ms
// per 1,000 of n orders; a process whose time could not be read is left out.
func cpuPerThousand(m *cpuMeter, a, b []float64, n int64) map[string]float64 {
	out := map[string]float64{}
	if m == nil || n <= 0 {
		return out
	}
	for i, name := range m.names() {
		if i < len(a) && i < len(b) && a[i] >= 0 && b[i] >= 0 {
			out[name] = (b[i] - a[i]) * 1000 * 1000 / float64(n)
		}
	}
	return out
}

// waitPastProcessing samples how many of pids' orders are past PROCESSING
// every 100 ms until all accepted are, or deadline. own counts its SELECTs.
func (r *run) waitPastProcessing(ctx context.Context, pids []int64, accepted int64, deadline time.Time) (samples []drainSample, own int64, err error) {
	for {
		n, err := r.countStatus(ctx, pids, order.WaitingPay, order.Failed, order.Cancelled)
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

// waitOutboxSent waits until pids have no unsent outbox row, or deadline;
// it returns the rows still unsent and its polls.
func (r *run) waitOutboxSent(ctx context.Context, pids []int64, deadline time.Time) (pending, polls int64) {
	for {
		n, err := r.env.Store.PendingOutboxFor(ctx, pids)
		polls++
		if err != nil || n == 0 || time.Now().After(deadline) {
			return n, polls
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// closeMeasured waits until every locked order of dr's products is
// CANCELLED (nobody pays) or the pay timeout + IdleWait passed, and records
// the close's cost per order (counters and CPU from the first close on, or
// from c1 and cpu1, the drain's end, when closes overlapped the drain), the
// delays past the deadline and the close rate.
func (r *run) closeMeasured(ctx context.Context, dr *drainRun, c1 counters, cpu1 []float64) error {
	var own int64
	closeBy := time.Now().Add(r.p.DrainPayTimeout + r.env.IdleWait)
	meter := r.cpuMeter()
	started := false
	for {
		n, err := r.countStatus(ctx, dr.pids, order.Cancelled)
		own++
		if err != nil {
			return err
		}
		if n > 0 && !started && !dr.closesOverlapped {
			// The costs count from the first close on: the wait for the
			// first deadline costs only what the idle roles poll.
			started = true
			c1, _ = r.readCounters(ctx)
			cpu1 = meter.sample()
			own = 0
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
	_, polls := r.waitOutboxSent(ctx, dr.pids, closeBy)
	own += polls
	sleepCtx(ctx, time.Second)
	c2, _ := r.readCounters(ctx)
	cpu2 := meter.sample()
	dr.closed, _ = r.countStatus(ctx, dr.pids, order.Cancelled)
	own++
	dr.closeCost = perOrder(c1, c2, max(dr.closed, 1), own)
	dr.closeCPU = cpuPerThousand(meter, cpu1, cpu2, dr.closed)
	var err error
	dr.closeDelay, dr.closeRate, err = r.closeDelays(ctx, dr.pids)
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

// countStatus counts the orders of pids in any of statuses.
func (r *run) countStatus(ctx context.Context, pids []int64, statuses ...order.Status) (int64, error) {
	args := make([]any, 0, len(pids)+len(statuses))
	for _, pid := range pids {
		args = append(args, pid)
	}
	for _, st := range statuses {
		args = append(args, string(st))
	}
	var n int64
	err := r.env.Store.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_info WHERE product_id IN (`+marksOf(len(pids))+`) AND status IN (`+
		marksOf(len(statuses))+`)`, args...).Scan(&n)
	return n, err
}

func marksOf(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

// closeDelays reads, for every CANCELLED order of pids, updated_at −
// pay_deadline: how long after its deadline it was closed; and the close
// rate: the orders closed over the span from the first deadline to the last
// close.
func (r *run) closeDelays(ctx context.Context, pids []int64) (loadgen.Summary, float64, error) {
	args := make([]any, len(pids))
	for i, pid := range pids {
		args[i] = pid
	}
	rows, err := r.env.Store.DB.QueryContext(ctx, `SELECT GREATEST(0, TIMESTAMPDIFF(MICROSECOND, pay_deadline, updated_at)), pay_deadline, updated_at
		FROM order_info WHERE product_id IN (`+marksOf(len(pids))+`) AND status = 'CANCELLED' AND pay_deadline IS NOT NULL`, args...)
	if err != nil {
		return loadgen.Summary{}, 0, err
	}
	defer rows.Close()
	h := loadgen.NewHistogram()
	var first, last time.Time
	var n int64
	for rows.Next() {
		var us int64
		var dl, at time.Time
		if err := rows.Scan(&us, &dl, &at); err != nil {
			return loadgen.Summary{}, 0, err
		}
		loadgen.Record(h, time.Duration(us)*time.Microsecond)
		if first.IsZero() || dl.Before(first) {
			first = dl
		}
		if at.After(last) {
			last = at
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return loadgen.Summary{}, 0, err
	}
	var rate float64
	if span := last.Sub(first); span > 0 {
		rate = float64(n) / span.Seconds()
	}
	return loadgen.Summarize(h), rate, nil
}
