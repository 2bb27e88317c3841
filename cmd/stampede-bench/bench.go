package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/stampede-sh/stampede/app"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/stampede-sh/stampede/bench"
	"github.com/stampede-sh/stampede/persistence"
)

// startForBench starts every Stampede role of cfg in this process (gateway
// on cfg.HTTPAddr) and returns a function that stops them and waits until
// they drained. While it is nil (a test sets it so), `stampede-bench bench`
// needs --url of a running gateway.
var startForBench = app.StartInProcess

type benchFlags struct {
	roomBuyers, roomSockets int
	roomStock               int64
	roomArrival             time.Duration
	drawEntries, drawSocks  int
	drawUnits, drawReserve  int64
	scenarios               string
	url                     string
	baselineURL             string
	baselineAddr            string
	baselineDurability      string
	levels                  string
	noBaseline              bool
	gatewayPID              int
	baselinePID             int
	quick                   bool
	out                     string
	idleWait                time.Duration
	ceiling                 bool
	reserveScript           string
	rabbitMetrics           string
	pipelineMetrics         string // --pipeline-metrics-addr
	// overrides of bench.Params; zero = the default (or quick) value
	users          int
	shards         int
	spikeBuyers    int
	spikeStock     int64
	spikeRate      float64
	sustainedRates string
	intakeAlone    bool
	baselineRates  string
	step           time.Duration
	soldOutRate    float64
	duplicateRate  float64
	e2eRate        float64
	e2eDuration    time.Duration
	drainOrders    int64
	drainRate      float64
	drainDesigns   string
	drainProducts  string
	drainPay       time.Duration
	closedConns    int
	ticketConns    string
	closedDuration time.Duration
	replayKeys     int
}

// benchPipeline runs the pipeline roles (writer, relay, consumer, sweeper)
// of an in-process benchmark as an app of their own (bench.Pipeline).
type benchPipeline struct {
	cfg app.Config
	// metricsAddr serves the pipeline roles' GET /metrics ("" none): the
	// pacer's gauges (stampede_room_*) and the writers', which the
	// gateway's port does not show.
	metricsAddr string
	stop        func()
}

// Start starts the pipeline roles with design ("" = the configured one) and
// payTimeout (0 = the configured one).
func (b *benchPipeline) Start(ctx context.Context, design string, payTimeout time.Duration) error {
	b.Stop()
	c := b.cfg
	c.Roles = "writer,relay,consumer,sweeper"
	c.MetricsAddr, c.PprofAddr = b.metricsAddr, ""
	if design != "" {
		c.ConsumerLock = design
	}
	if payTimeout > 0 {
		c.PayTimeout = payTimeout
	}
	stop, err := startForBench(ctx, &c)
	if err != nil {
		return err
	}
	b.stop = stop
	return nil
}

// Stop stops the running pipeline roles, if any, after they drained.
func (b *benchPipeline) Stop() {
	if b.stop != nil {
		b.stop()
		b.stop = nil
	}
}

// runBench is `stampede bench`: it starts the system under test (in this
// process unless --url), the baselines or durability levels to compare it
// with, runs the scenarios against them all and writes the report.
func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	r, err := newBenchRun(args, stdout)
	if err != nil {
		return err
	}
	defer r.stopAll()
	if err := r.startLevels(ctx); err != nil {
		return err
	}
	sut, pipe, err := r.startSUT(ctx)
	if err != nil {
		return err
	}
	targets, err := r.levelTargets(ctx, sut)
	if err != nil {
		return err
	}
	if targets, err = r.baselineTarget(ctx, targets); err != nil {
		return err
	}
	return r.run(ctx, targets, pipe)
}

// benchRun is one `stampede bench`: its flags and settings, and what it
// started, stopped last first when it ends (stopAll).
type benchRun struct {
	f         benchFlags
	cfg       *app.Config
	args      []string
	stdout    io.Writer
	scenarios []string
	params    bench.Params
	idleWait  time.Duration
	levels    []string    // --durability-levels; nil without
	priv      *benchRedis // the level comparison's private Redis
	stops     []func()
}

// newBenchRun parses bench's flags and settings and resolves the scenarios
// to run. Errors wrap app.ErrUsage for bad flags.
func newBenchRun(args []string, stdout io.Writer) (*benchRun, error) {
	r := &benchRun{args: args, stdout: stdout}
	cfg, err := app.Parse("bench", args, r.f.registerBenchFlags)
	if err != nil {
		return nil, err
	}
	r.cfg = cfg
	if r.scenarios, r.params, r.idleWait, err = r.f.resolve(); err != nil {
		return nil, err
	}
	if r.f.url != "" && r.allScenarios() {
		// The drain stops and restarts the pipeline roles: only with every
		// role in this process.
		r.scenarios = slices.DeleteFunc(r.scenarios, func(s string) bool { return s == bench.Drain })
	}
	return r, nil
}

// allScenarios is whether --scenarios was left at its default, every one.
func (r *benchRun) allScenarios() bool { return r.f.scenarios == strings.Join(bench.All, ",") }

// onStop adds stop to what stopAll runs.
func (r *benchRun) onStop(stop func()) { r.stops = append(r.stops, stop) }

// stopAll stops what the run started, last started first.
func (r *benchRun) stopAll() {
	for i := len(r.stops) - 1; i >= 0; i-- {
		r.stops[i]()
	}
}

// registerBenchFlags registers bench's own flags and the scenario flags it
// shares with bench-scale.
func (f *benchFlags) registerBenchFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.scenarios, "scenarios", strings.Join(bench.All, ","), "comma-separated scenarios: "+strings.Join(bench.All, ","))
	fs.StringVar(&f.url, "url", "", "base URL of the gateway to load, e.g. http://127.0.0.1:8080 (loopback only); empty = start every role in this process, if this binary can")
	fs.StringVar(&f.baselineURL, "baseline-url", "", "base URL of a second gateway, the synchronous-intake baseline (STAMPEDE_INTAKE=sync), reported side by side as \"sync\"")
	fs.StringVar(&f.baselineAddr, "baseline-addr", "127.0.0.1:8090", "without --url and --baseline-url: listen address of the in-process synchronous-intake gateway started as the baseline")
	fs.BoolVar(&f.noBaseline, "no-baseline", false, "without --url: do not start the in-process sync baseline gateway")
	fs.StringVar(&f.baselineDurability, "baseline-durability", "", "without --url: the in-process baseline gateway uses stream intake with this Redis durability (none, aof, replicated) instead of sync intake, labelled with the level; the system under test keeps -redis-durability (issue 13: intake per durability level in one run)")
	fs.StringVar(&f.levels, "durability-levels", "", "without --url: compare these Redis durability levels in one run, e.g. none,aof,replicated: one in-process gateway per level (the first on -http-addr, the others on -baseline-addr's port and up), back to back, on a private Redis primary with one replica that the bench starts on loopback (redis-server on PATH) and removes at the end; scenarios sustained (the default) and soldout")
	fs.IntVar(&f.gatewayPID, "gateway-pid", 0, "pid of the process serving --url, whose RSS is reported (0 = not measured; in-process = this process)")
	fs.IntVar(&f.baselinePID, "baseline-pid", 0, "pid of the process serving --baseline-url")
	fs.BoolVar(&f.ceiling, "ceiling", true, "run redis-benchmark against the reserve script (if on PATH)")
	fs.StringVar(&f.reserveScript, "reserve-script", "lua/reserve.lua", "path of reserve.lua, for the redis-benchmark ceiling")
	fs.IntVar(&f.shards, "shards", 0, "Redis stock shards of every product created (default 1)")
	fs.StringVar(&f.rabbitMetrics, "rabbitmq-metrics-url", "http://127.0.0.1:15692/metrics", "RabbitMQ's Prometheus endpoint (plugin rabbitmq_prometheus), read for the drain's messages per order (empty: not read)")
	fs.StringVar(&f.pipelineMetrics, "pipeline-metrics-addr", "", "without --url: serve the in-process pipeline roles' GET /metrics here (the pacer's stampede_room_* gauges, the writers' and the consumers' series; the gateway's port shows only the gateway's and push's)")
	fs.StringVar(&f.baselineRates, "baseline-rates", "", "sustained: rates to step through against the sync baseline (default 250,500,1k,2k,3k,4k,6k,8k)")
	fs.Float64Var(&f.duplicateRate, "duplicate-rate", 0, "duplicate: rate, requests/s (default 20000)")
	f.registerScenarioFlags(fs)
}

// startLevels, with --durability-levels, starts the private Redis the
// levels are compared on and points the system under test at it, with the
// first level; without, it does nothing.
func (r *benchRun) startLevels(ctx context.Context) error {
	if r.f.levels == "" {
		return nil
	}
	levels, err := parseLevels(r.f.levels)
	if err != nil {
		return err
	}
	r.levels = levels
	if r.allScenarios() {
		r.scenarios = []string{bench.Sustained}
	}
	if err := r.f.checkLevelFlags(r.scenarios); err != nil {
		return err
	}
	if startForBench == nil {
		return fmt.Errorf("%w: --durability-levels needs a build that can start the app in-process", app.ErrUsage)
	}
	if r.priv, err = startBenchRedis(ctx); err != nil {
		return err
	}
	r.onStop(r.priv.stop)
	fmt.Fprintf(r.stdout, "bench: private Redis primary %s, replica %s\n", r.priv.primary, r.priv.replica)
	r.cfg.RedisAddr, r.cfg.RedisSentinelMaster, r.cfg.RedisDurability = r.priv.primary, "", levels[0]
	r.f.noBaseline = true
	return nil
}

// levelTarget labels a target with its durability level and switches the
// private Redis to it before its scenarios.
func (r *benchRun) levelTarget(t bench.Target, level string) bench.Target {
	t.Label, t.Durability = level, level
	t.Prepare = func(ctx context.Context) error {
		if err := r.priv.setLevel(ctx, level); err != nil {
			return err
		}
		fmt.Fprintf(r.stdout, "bench: level %s: private Redis primary %s\n", level, r.priv.describe(ctx))
		return nil
	}
	return t
}

// startSUT is the system under test: the gateway at --url, or, without,
// every role started in this process — the gateway and push for the whole
// run, the pipeline roles apart (pipe), so that the drain scenario can stop
// them and start them again with another design. pipe is nil with --url.
func (r *benchRun) startSUT(ctx context.Context) (sut bench.Target, pipe bench.Pipeline, err error) {
	sut = bench.Target{Label: "stream", URL: r.f.url, GatewayPID: r.f.gatewayPID}
	if r.f.url != "" {
		return sut, nil, nil
	}
	if startForBench == nil {
		return sut, nil, fmt.Errorf("%w: --url of a running gateway is required (this build cannot start the app in-process)", app.ErrUsage)
	}
	cfg := r.cfg
	if cfg.NodeID == -1 {
		cfg.NodeID = 1 // the baseline gateway takes node 2
	}
	cfg.Intake = "stream"
	if err := app.AdoptQueueType(ctx, cfg, r.args, r.stdout); err != nil {
		return sut, nil, err
	}
	front := *cfg
	front.Roles = "gateway,push"
	for _, addr := range []string{front.HTTPAddr, front.PushAddr} {
		if err := addrFree(addr); err != nil {
			return sut, nil, err
		}
	}
	stop, err := startForBench(ctx, &front)
	if err != nil {
		return sut, nil, fmt.Errorf("bench: start the app: %w", err)
	}
	r.onStop(stop)
	pc := &benchPipeline{cfg: *cfg, metricsAddr: r.f.pipelineMetrics}
	if err := pc.Start(ctx, "", 0); err != nil {
		return sut, nil, fmt.Errorf("bench: start the pipeline roles: %w", err)
	}
	r.onStop(pc.Stop)
	sut.URL = "http://" + cfg.HTTPAddr
	sut.GatewayPID, sut.InProcess = os.Getpid(), true
	return sut, pc, nil
}

// levelTargets is sut alone, or with --durability-levels sut on the first
// level and one in-process gateway started per further level.
func (r *benchRun) levelTargets(ctx context.Context, sut bench.Target) ([]bench.Target, error) {
	if r.levels == nil {
		return []bench.Target{sut}, nil
	}
	targets := []bench.Target{r.levelTarget(sut, r.levels[0])}
	for i, level := range r.levels[1:] {
		lc := *r.cfg
		lc.Roles, lc.Intake, lc.RedisDurability = "gateway", "stream", level
		var err error
		if lc.HTTPAddr, err = levelAddr(r.f.baselineAddr, i+1); err != nil {
			return nil, err
		}
		lc.NodeID = (r.cfg.NodeID + int64(i) + 1) % 1024
		lc.MetricsAddr, lc.PprofAddr = "", ""
		stop, err := startForBench(ctx, &lc)
		if err != nil {
			return nil, fmt.Errorf("bench: start the %s gateway: %w", level, err)
		}
		r.onStop(stop)
		targets = append(targets, r.levelTarget(bench.Target{URL: "http://" + lc.HTTPAddr, GatewayPID: os.Getpid(), InProcess: true}, level))
	}
	return targets, nil
}

// baselineTarget adds the baseline to targets: the gateway at
// --baseline-url or, in process unless --no-baseline, a second gateway
// with synchronous intake (or stream intake at --baseline-durability) on
// the same Redis and MySQL, whose orders the first app's relay, consumers
// and sweeper carry on.
func (r *benchRun) baselineTarget(ctx context.Context, targets []bench.Target) ([]bench.Target, error) {
	switch {
	case r.f.baselineURL != "":
		return append(targets, bench.Target{Label: "sync", URL: r.f.baselineURL, GatewayPID: r.f.baselinePID}), nil
	case r.f.url != "" || r.f.noBaseline:
		return targets, nil
	}
	bc := *r.cfg
	bc.Roles, bc.Intake, bc.HTTPAddr = "gateway", "sync", r.f.baselineAddr
	label := "sync"
	if r.f.baselineDurability != "" {
		bc.Intake, bc.RedisDurability, label = "stream", r.f.baselineDurability, r.f.baselineDurability
		if label == r.cfg.RedisDurability || (label == "none" && r.cfg.RedisDurability == "") {
			return nil, fmt.Errorf("%w: --baseline-durability %s is the system under test's level", app.ErrUsage, label)
		}
	}
	bc.NodeID = (r.cfg.NodeID + 1) % 1024
	bc.MetricsAddr, bc.PprofAddr = "", ""
	stop, err := startForBench(ctx, &bc)
	if err != nil {
		return nil, fmt.Errorf("bench: start the %s baseline gateway: %w", label, err)
	}
	r.onStop(stop)
	return append(targets, bench.Target{Label: label, URL: "http://" + bc.HTTPAddr, GatewayPID: os.Getpid(), InProcess: true}), nil
}

// run runs the scenarios against targets, writes the report to --out and
// prints its summary; an error if a scenario failed or could not run.
func (r *benchRun) run(ctx context.Context, targets []bench.Target, pipe bench.Pipeline) error {
	cfg := r.cfg
	store, err := persistence.Open(ctx, cfg.MySQLDSN)
	if err != nil {
		return err
	}
	defer store.Close()
	rdb := app.NewRedis(cfg)
	defer rdb.Close()
	r.params.RoomTarget = cfg.RoomTargetBacklog // the in-process pacer's (or, with --url, the default's)
	env := bench.Env{
		Redis: rdb, Store: store, JWTSecret: []byte(cfg.JWTSecret),
		RedisAddr: cfg.RedisAddr, RedisDB: cfg.RedisDB, ReserveScript: r.reserveScript(), Log: r.stdout, IdleWait: r.idleWait,
		Pipeline: pipe, RabbitMQMetricsURL: r.f.rabbitMetrics, Servers: serverAddrs(*cfg),
	}
	rep, runErr := bench.Run(ctx, env, bench.Options{Scenarios: r.scenarios, Targets: targets, Params: r.params, Ceiling: r.f.ceiling,
		Levels: r.levels != nil, RedisCommands: r.levels != nil,
		Command: "stampede bench " + strings.Join(redactSecrets(r.args), " ")})
	if rep != nil && len(rep.Results) > 0 {
		jsonPath, mdPath, err := rep.WriteFiles(r.f.out)
		if err != nil {
			return fmt.Errorf("bench: write report: %w", err)
		}
		fmt.Fprintf(r.stdout, "\n%s\nreport: %s, %s\n", rep.SummaryMarkdown(), mdPath, jsonPath)
	}
	if runErr != nil {
		return runErr
	}
	if !rep.Pass {
		return errors.New("bench: a scenario FAILED its audit or could not run (see the report)")
	}
	return nil
}

// reserveScript is the reserve script the redis-benchmark ceiling runs,
// "" without --ceiling or when it cannot be read (said on stdout).
func (r *benchRun) reserveScript() string {
	if !r.f.ceiling {
		return ""
	}
	b, err := os.ReadFile(r.f.reserveScript)
	if err != nil {
		fmt.Fprintf(r.stdout, "bench: no redis-benchmark ceiling: %v\n", err)
		return ""
	}
	return string(b)
}

// registerScenarioFlags registers the flags `bench` and `bench-scale` share:
// run size, output and the scenarios' sizes.
func (f *benchFlags) registerScenarioFlags(fs *flag.FlagSet) {
	fs.BoolVar(&f.quick, "quick", false, "smoke run: every scenario shrunk to about two seconds of load")
	fs.StringVar(&f.out, "out", "bench/results", "directory for the reports (<date>.json and <date>.md)")
	fs.DurationVar(&f.idleWait, "idle-wait", 0, "longest wait for the pipeline to go idle before each audit (default 10m, 2m with --quick)")
	fs.IntVar(&f.users, "users", 0, "distinct buyers with pre-issued tokens (default 100000, 5000 with --quick)")
	fs.IntVar(&f.spikeBuyers, "spike-buyers", 0, "spike: buyers, one request each (default 100000)")
	fs.Int64Var(&f.spikeStock, "spike-stock", 0, "spike: units on sale (default 1000)")
	fs.Float64Var(&f.spikeRate, "spike-rate", 0, "spike: arrival rate, requests/s (default 25000)")
	fs.StringVar(&f.sustainedRates, "sustained-rates", "", "sustained: comma-separated rates to step through, e.g. 2k,4k,8k (default 2k,4k,8k,12k,…,32k)")
	fs.DurationVar(&f.step, "step", 0, "sustained: measured length of each step (default 5s)")
	fs.Float64Var(&f.soldOutRate, "soldout-rate", 0, "soldout: storm rate, requests/s (default 60000)")
	fs.Float64Var(&f.e2eRate, "e2e-rate", 0, "e2e: intake rate, requests/s (default 10000)")
	fs.DurationVar(&f.e2eDuration, "e2e-duration", 0, "e2e: length of the intake (default 10s)")
	fs.Int64Var(&f.drainOrders, "drain-orders", 0, "drain: reservations accepted with the pipeline stopped, per design (default 50000)")
	fs.Float64Var(&f.drainRate, "drain-rate", 0, "drain: rate they are accepted at, requests/s (default 12000)")
	fs.BoolVar(&f.intakeAlone, "sustained-intake-alone", true, "sustained: first step the rates with the pipeline roles stopped (gateway + Redis alone) and report the full system's highest clean step as a ratio to that one (needs every role in the bench process)")
	fs.StringVar(&f.drainProducts, "drain-products", "", "drain: comma-separated product counts to drain each design over, e.g. 1,16: the orders spread round robin over that many products (default 1: one hot product)")
	fs.StringVar(&f.drainDesigns, "drain-designs", "", "drain: order-lock designs to drain with, in order (writer or batch; default batch,writer)")
	fs.IntVar(&f.closedConns, "closed-conns", 0, "soldout, replay: connections of the closed-loop runs (default 128)")
	fs.StringVar(&f.ticketConns, "ticket-conns", "", "tickets: comma-separated connection counts at which the interleaved rounds of bare /healthz and tickets are repeated (default 128,256,512,1024; 128,256 with --quick)")
	fs.DurationVar(&f.closedDuration, "closed-duration", 0, "soldout, replay: length of each closed-loop run (default 5s, 1s with --quick)")
	fs.IntVar(&f.replayKeys, "replay-keys", 0, "replay: intents accepted, then re-sent (default 10000, 2000 with --quick)")
	fs.IntVar(&f.roomBuyers, "room-buyers", 0, "waitingroom: buyers taking a ticket (default 100000, 2000 with --quick)")
	fs.Int64Var(&f.roomStock, "room-stock", 0, "waitingroom: units on sale (default 5000, 200 with --quick)")
	fs.DurationVar(&f.roomArrival, "room-arrival", 0, "waitingroom: every buyer arrives within this (default 10s, 2s with --quick)")
	fs.IntVar(&f.roomSockets, "room-sockets", 0, "waitingroom: sample buyers following the line over push WebSockets (default 200, 20 with --quick)")
	fs.IntVar(&f.drawEntries, "draw-entries", 0, "draw: buyers entering the draw (default 100000, 2000 with --quick)")
	fs.Int64Var(&f.drawUnits, "draw-units", 0, "draw: units drawn, one per winner (default 5000, 100 with --quick)")
	fs.Int64Var(&f.drawReserve, "draw-reserve", -1, "draw: reserve list length (default 1000, 50 with --quick)")
	fs.IntVar(&f.drawSocks, "draw-sockets", 0, "draw: sample entrants following the draw over push WebSockets (default 200, 20 with --quick)")
	fs.DurationVar(&f.drainPay, "drain-pay-timeout", 0, "drain: pay timeout of the drained orders; nobody pays, so each is closed at its deadline and the close delay measured (default 1m)")
}

// resolve reads the scenario flags: the scenarios to run, their sizes and
// the idle wait. Errors wrap app.ErrUsage.
func (f *benchFlags) resolve() (scenarios []string, params bench.Params, idleWait time.Duration, err error) {
	if scenarios, err = bench.ParseScenarios(f.scenarios); err != nil {
		return nil, params, 0, fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	if params, err = f.params(); err != nil {
		return nil, params, 0, fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	return scenarios, params, f.idleWaitOrDefault(), nil
}

// idleWaitOrDefault is --idle-wait, or 10m (2m with --quick).
func (f *benchFlags) idleWaitOrDefault() time.Duration {
	switch {
	case f.idleWait > 0:
		return f.idleWait
	case f.quick:
		return 2 * time.Minute
	}
	return 10 * time.Minute
}

// setPositive sets *dst to v when v > 0 (a flag left at 0 keeps the default).
func setPositive[T int | int64 | float64 | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// params is the default (or quick) parameter set with the flags' overrides.
func (f *benchFlags) params() (bench.Params, error) {
	p := bench.DefaultParams()
	if f.quick {
		p = bench.QuickParams()
	}
	setPositive(&p.Users, f.users)
	setPositive(&p.Shards, f.shards)
	setPositive(&p.SpikeBuyers, f.spikeBuyers)
	setPositive(&p.SpikeStock, f.spikeStock)
	setPositive(&p.SpikeRate, f.spikeRate)
	setPositive(&p.SustainedStep, f.step)
	setPositive(&p.SoldOutRate, f.soldOutRate)
	setPositive(&p.DuplicateRate, f.duplicateRate)
	setPositive(&p.E2ERate, f.e2eRate)
	setPositive(&p.E2EDuration, f.e2eDuration)
	setPositive(&p.DrainOrders, f.drainOrders)
	setPositive(&p.DrainRate, f.drainRate)
	setPositive(&p.DrainPayTimeout, f.drainPay)
	setPositive(&p.ClosedConns, f.closedConns)
	setPositive(&p.ClosedDuration, f.closedDuration)
	setPositive(&p.ReplayKeys, f.replayKeys)
	setPositive(&p.RoomBuyers, f.roomBuyers)
	setPositive(&p.RoomSockets, f.roomSockets)
	setPositive(&p.RoomStock, f.roomStock)
	setPositive(&p.RoomArrival, f.roomArrival)
	setPositive(&p.DrawEntries, f.drawEntries)
	setPositive(&p.DrawSockets, f.drawSocks)
	setPositive(&p.DrawUnits, f.drawUnits)
	if f.drawReserve >= 0 {
		p.DrawReserve = f.drawReserve
	}
	if f.drainDesigns != "" {
		p.DrainDesigns = nil
		for _, d := range strings.Split(f.drainDesigns, ",") {
			if d = strings.TrimSpace(d); d != "" {
				p.DrainDesigns = append(p.DrainDesigns, d)
			}
		}
	}
	if f.drainProducts != "" {
		p.DrainProducts = nil
		for _, part := range strings.Split(f.drainProducts, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(part))
			if err != nil {
				return p, fmt.Errorf("bench: --drain-products %q: %w", f.drainProducts, err)
			}
			p.DrainProducts = append(p.DrainProducts, n)
		}
	}
	p.SustainedIntakeAlone = f.intakeAlone
	if f.ticketConns != "" {
		p.TicketConns = nil
		for _, part := range strings.Split(f.ticketConns, ",") {
			if part = strings.TrimSpace(part); part == "" {
				continue
			}
			c, err := strconv.Atoi(part)
			if err != nil || c < 1 {
				return p, fmt.Errorf("bad connection count %q in --ticket-conns", part)
			}
			p.TicketConns = append(p.TicketConns, c)
		}
	}
	if f.sustainedRates != "" {
		rates, err := parseRates(f.sustainedRates)
		if err != nil {
			return p, err
		}
		p.SustainedRates = rates
	}
	if f.baselineRates != "" {
		rates, err := parseRates(f.baselineRates)
		if err != nil {
			return p, err
		}
		p.BaselineRates = rates
	}
	return p, p.Validate()
}

// parseRates reads "2000,4k,1.5k".
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(strings.ToLower(part))
		if part == "" {
			continue
		}
		mult := 1.0
		if v, ok := strings.CutSuffix(part, "k"); ok {
			part, mult = v, 1000
		}
		v, err := strconv.ParseFloat(part, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad rate %q in --sustained-rates", part)
		}
		out = append(out, v*mult)
	}
	if len(out) == 0 {
		return nil, errors.New("--sustained-rates lists no rate")
	}
	return out, nil
}

// redactSecrets returns args with the values of secret flags
// (-jwt-secret, -payment-secret, …) replaced, for reports.
func redactSecrets(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !strings.Contains(name, "secret") {
			continue
		}
		if hasValue {
			out[i] = a[:strings.Index(a, "=")+1] + "REDACTED"
		} else if i+1 < len(out) {
			out[i+1] = "REDACTED"
		}
	}
	return out
}

// serverAddrs are the host:port of the configured Redis, MySQL and RabbitMQ
// (bench.Env.Servers); a setting that names several servers (a cluster) or
// cannot be read is left out.
func serverAddrs(cfg app.Config) map[string]string {
	out := map[string]string{}
	if !strings.Contains(cfg.RedisAddr, ",") {
		out["redis"] = cfg.RedisAddr
	}
	if c, err := mysql.ParseDSN(cfg.MySQLDSN); err == nil && c.Net == "tcp" {
		out["mysql"] = c.Addr
	}
	if u, err := url.Parse(cfg.AMQPURL); err == nil && !strings.Contains(cfg.AMQPURL, ",") && u.Host != "" {
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "5672")
		}
		out["rabbitmq"] = host
	}
	return out
}

// addrFree fails when addr cannot be listened on: without this the
// in-process gateway's listen error stays in its own goroutine and the bench
// loads whatever already answers there (a `make demo` still serving on
// :8080 answered it, and only the audit noticed).
func addrFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("bench: %s is taken (another stampede, `make demo`?): %w; stop it or pass --http-addr / --push-addr", addr, err)
	}
	return ln.Close()
}
