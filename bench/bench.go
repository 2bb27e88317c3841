package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/bench/loadgen"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

// Scenario names, in the order Run runs them.
const (
	Spike     = "spike"
	Sustained = "sustained"
	SoldOut   = "soldout"
	Duplicate = "duplicate"
	Replay    = "replay"
	E2E       = "e2e"
	Drain     = "drain"
	// WaitingRoom: see waitingroom.go (const WaitingRoom); Tickets, Draw:
	// drops.go.
)

// All lists every scenario in run order.
var All = []string{Spike, Sustained, SoldOut, Duplicate, Replay, E2E, Drain, WaitingRoom, Tickets, Draw}

// Env is what the scenarios need besides the gateway: direct access to the
// Redis and MySQL the gateway uses (for the audit and the end-to-end
// timings) and the secret its tokens are signed with.
type Env struct {
	Redis     redis.UniversalClient
	Store     *persistence.Store
	JWTSecret []byte
	// RedisAddr is the host:port redis-benchmark connects to for the
	// ceiling; "" (or a cluster) skips the ceiling.
	RedisAddr string
	// RedisDB is the database number the gateway uses (redis-benchmark --dbnum).
	RedisDB int
	// ReserveScript is the source of lua/reserve.lua, loaded with SCRIPT LOAD
	// for the ceiling; "" skips the ceiling.
	ReserveScript string
	// Log receives one line per phase; nil discards.
	Log io.Writer
	// IdleWait bounds the wait for the pipeline to go idle before each
	// audit. Default 10m.
	IdleWait time.Duration

	// Pipeline pauses and restarts the pipeline roles for the drain
	// scenario; nil: drain cannot run (a gateway given by --url).
	Pipeline Pipeline
	// RabbitMQMetricsURL is the broker's Prometheus endpoint (plugin
	// rabbitmq_prometheus), read for the messages per order of the drain;
	// "" skips them.
	RabbitMQMetricsURL string
	// Servers are the host:port of the shared servers by name (redis,
	// mysql, rabbitmq): the sustained steps charge the CPU time of the
	// local processes listening there to the orders (cpu.go); a name left
	// out, or a server on another machine, gets no column.
	Servers map[string]string

	// settled replaces the count of a product's orders past PROCESSING in
	// tests of this package.
	settled func(ctx context.Context, productID int64) (int64, error)
	// audit replaces the docs/spec.md §5 audit in tests of this package.
	audit func(ctx context.Context, productID int64) (pipeline.Report, error)
}

// Target is a gateway to load.
type Target struct {
	// Label names the target in the report: "stream" (Stampede's intake) or
	// "sync" (the synchronous-intake baseline).
	Label string `json:"label"`
	// URL is the gateway's base URL, http://host:port on loopback.
	URL string `json:"url"`
	// GatewayPID is the process whose memory is read from /proc; 0 = not
	// measured.
	GatewayPID int `json:"gatewayPid,omitempty"`
	// InProcess says the gateway runs inside the bench process, so its RSS
	// also holds every other role and the load generator.
	InProcess bool `json:"inProcess,omitempty"`
	// Durability is the gateway's Redis durability level (none, aof,
	// replicated) when the run compares levels (Options.Levels).
	Durability string `json:"durability,omitempty"`
	// Prepare, if set, runs before the target's warm-up and scenarios (the
	// level comparison switches the Redis server's appendonly with it). An
	// error fails the run.
	Prepare func(ctx context.Context) error `json:"-"`
}

// Options select what Run does.
type Options struct {
	// Scenarios to run, in the order of All whatever the order here. Nil = All.
	Scenarios []string
	// Targets: the first is the system under test, an optional second the
	// baseline. At least one. With Levels, one target per durability level
	// (each with Target.Durability), all run with SustainedRates.
	Targets []Target
	// Levels compares Redis durability levels: any number of targets, a
	// per-level table in the report, no stream-vs-sync goal.
	Levels bool
	// RedisCommands records each scenario's INFO commandstats delta of
	// Env.Redis (a single server) per accepted order: the figures that do
	// not drift with the machine's load.
	RedisCommands bool
	Params        Params
	// Ceiling runs redis-benchmark against the reserve script.
	Ceiling bool
	// Command is recorded in the report.
	Command string
}

// Params size the scenarios. DefaultParams is the full benchmark,
// QuickParams a smoke run of about two seconds per scenario.
type Params struct {
	Quick bool `json:"quick"`
	// Users is the number of distinct buyers with a pre-issued JWT; raised
	// to SpikeBuyers if smaller.
	Users int `json:"users"`
	// UserBase is the first userId; buyers are UserBase+1 … UserBase+Users.
	UserBase int64 `json:"userBase"`
	// Shards is the number of Redis stock shards of every product created.
	Shards int `json:"shards"`
	// Timeout bounds one request.
	Timeout time.Duration `json:"timeout"`

	SpikeBuyers int     `json:"spikeBuyers"`
	SpikeStock  int64   `json:"spikeStock"`
	SpikeRate   float64 `json:"spikeRate"`

	SustainedStock int64     `json:"sustainedStock"`
	SustainedRates []float64 `json:"sustainedRates"`
	// BaselineRates are the sustained steps of a baseline target (index > 0,
	// the synchronous intake), which starts far lower.
	BaselineRates   []float64     `json:"baselineRates"`
	SustainedWarmup time.Duration `json:"sustainedWarmup"`
	SustainedStep   time.Duration `json:"sustainedStep"`
	SustainedP99    time.Duration `json:"sustainedP99"` // a step passes if its p99 is at most this
	// SustainedIntakeAlone first steps SustainedRates with the pipeline
	// roles stopped (gateway + Redis alone) and reports the full system's
	// highest clean step as a ratio to that one (intakealone.go). Needs the
	// pipeline in the bench process; ignored for baselines and levels.
	SustainedIntakeAlone bool `json:"sustainedIntakeAlone"`

	SoldOutStock    int64         `json:"soldOutStock"`
	SoldOutRate     float64       `json:"soldOutRate"`
	SoldOutWarmup   time.Duration `json:"soldOutWarmup"`
	SoldOutDuration time.Duration `json:"soldOutDuration"`

	DuplicateKeys    int     `json:"duplicateKeys"`    // distinct (user, requestId)
	DuplicateReplays int     `json:"duplicateReplays"` // sends of each
	DuplicateBurst   int     `json:"duplicateBurst"`   // consecutive sends of one key per round
	DuplicateRate    float64 `json:"duplicateRate"`

	// ClosedConns and ClosedDuration shape the closed-loop runs (closedloop.go):
	// GET /healthz and the sold-out storm of soldout, the replay storm of
	// replay. ReplayKeys is the number of intents replay accepts and re-sends.
	ClosedConns    int           `json:"closedConns"`
	ClosedDuration time.Duration `json:"closedDuration"`
	ReplayKeys     int           `json:"replayKeys"`
	// TicketConns are the connection counts at which tickets repeats its
	// interleaved rounds of bare GET /healthz and new tickets (drops.go
	// ticketSweep); none: ClosedConns alone.
	TicketConns []int `json:"ticketConns,omitempty"`

	E2ERate     float64       `json:"e2eRate"`
	E2EDuration time.Duration `json:"e2eDuration"`
	E2EPoll     time.Duration `json:"e2ePoll"` // period of the WAITING_PAY count

	// DrainOrders reservations are accepted at DrainRate with the pipeline
	// stopped, then drained by each of DrainDesigns (default DesignBatch,
	// then DesignWriter)
	// with pay timeout DrainPayTimeout, once per count of DrainProducts:
	// the orders spread round robin over that many products (default 1,
	// one hot product; the product's stock is DrainOrders / the count).
	DrainOrders     int64         `json:"drainOrders"`
	DrainRate       float64       `json:"drainRate"`
	DrainDesigns    []string      `json:"drainDesigns"`
	DrainProducts   []int         `json:"drainProducts,omitempty"`
	DrainPayTimeout time.Duration `json:"drainPayTimeout"`

	// RoomBuyers take a ticket within RoomArrival for RoomStock units of a
	// product with its waiting room on; RoomSockets of them follow the line
	// over push (waitingroom.go).
	RoomBuyers  int           `json:"roomBuyers"`
	RoomStock   int64         `json:"roomStock"`
	RoomArrival time.Duration `json:"roomArrival"`
	RoomSockets int           `json:"roomSockets"`
	// RoomTarget is the server's STAMPEDE_ROOM_TARGET_BACKLOG, which the
	// waitingroom scenario measures the backlog against.
	RoomTarget time.Duration `json:"roomTarget"`

	// DrawEntries buyers enter a draw for DrawUnits units with a reserve
	// list of DrawReserve; DrawSockets follow it over push (drops.go).
	DrawEntries int   `json:"drawEntries"`
	DrawUnits   int64 `json:"drawUnits"`
	DrawReserve int64 `json:"drawReserve"`
	DrawSockets int   `json:"drawSockets"`

	CeilingRequests int `json:"ceilingRequests"` // redis-benchmark -n
	CeilingClients  int `json:"ceilingClients"`  // redis-benchmark -c
}

// MarshalJSON writes the durations as Go duration strings ("5s").
func (p Params) MarshalJSON() ([]byte, error) {
	type plain Params
	return json.Marshal(struct {
		plain
		Timeout         string `json:"timeout"`
		SustainedWarmup string `json:"sustainedWarmup"`
		SustainedStep   string `json:"sustainedStep"`
		SustainedP99    string `json:"sustainedP99"`
		SoldOutWarmup   string `json:"soldOutWarmup"`
		SoldOutDuration string `json:"soldOutDuration"`
		E2EDuration     string `json:"e2eDuration"`
		E2EPoll         string `json:"e2ePoll"`
		DrainPayTimeout string `json:"drainPayTimeout"`
		ClosedDuration  string `json:"closedDuration"`
		RoomTarget      string `json:"roomTarget"`
	}{plain(p), p.Timeout.String(), p.SustainedWarmup.String(), p.SustainedStep.String(), p.SustainedP99.String(),
		p.SoldOutWarmup.String(), p.SoldOutDuration.String(), p.E2EDuration.String(), p.E2EPoll.String(), p.DrainPayTimeout.String(), p.ClosedDuration.String(), p.RoomTarget.String()})
}

// DefaultParams is the full benchmark of issue 5.
func DefaultParams() Params {
	return Params{
		Users: 100_000, UserBase: 7_000_000_000, Shards: 1, Timeout: 5 * time.Second,
		SpikeBuyers: 100_000, SpikeStock: 1_000, SpikeRate: 25_000,
		SustainedStock:  10_000_000,
		SustainedRates:  []float64{2_000, 4_000, 8_000, 12_000, 16_000, 20_000, 24_000, 28_000, 32_000},
		BaselineRates:   []float64{250, 500, 1_000, 2_000, 3_000, 4_000, 6_000, 8_000},
		SustainedWarmup: time.Second, SustainedStep: 5 * time.Second, SustainedP99: 50 * time.Millisecond, SustainedIntakeAlone: true,
		SoldOutStock: 100, SoldOutRate: 60_000, SoldOutWarmup: time.Second, SoldOutDuration: 5 * time.Second,
		DuplicateKeys: 2_000, DuplicateReplays: 50, DuplicateBurst: 10, DuplicateRate: 20_000,
		ClosedConns: 128, ClosedDuration: 5 * time.Second, ReplayKeys: 10_000, TicketConns: []int{128, 256, 512, 1024},
		E2ERate: 10_000, E2EDuration: 10 * time.Second, E2EPoll: 250 * time.Millisecond,
		DrainOrders: 50_000, DrainRate: 12_000, DrainDesigns: []string{DesignBatch, DesignWriter}, DrainProducts: []int{1}, DrainPayTimeout: time.Minute,
		RoomBuyers: 100_000, RoomStock: 5_000, RoomArrival: 10 * time.Second, RoomSockets: 200, RoomTarget: 2 * time.Second,
		DrawEntries: 100_000, DrawUnits: 5_000, DrawReserve: 1_000, DrawSockets: 200,
		CeilingRequests: 200_000, CeilingClients: 50,
	}
}

// QuickParams shrinks every scenario to about two seconds of load, for a CI
// smoke run. Its numbers say nothing about capacity.
func QuickParams() Params {
	p := DefaultParams()
	p.Quick = true
	p.Users = 5_000
	p.SpikeBuyers, p.SpikeStock, p.SpikeRate = 5_000, 100, 5_000
	p.SustainedStock = 1_000_000
	p.SustainedRates = []float64{1_000, 2_000}
	p.BaselineRates = []float64{250, 500}
	p.SustainedWarmup, p.SustainedStep = 250*time.Millisecond, 750*time.Millisecond
	p.SoldOutStock, p.SoldOutRate, p.SoldOutWarmup, p.SoldOutDuration = 20, 3_000, 500*time.Millisecond, 1500*time.Millisecond
	p.DuplicateKeys, p.DuplicateReplays, p.DuplicateBurst, p.DuplicateRate = 200, 10, 5, 2_000
	p.E2ERate, p.E2EDuration = 1_000, 2*time.Second
	p.ClosedDuration, p.ReplayKeys, p.TicketConns = time.Second, 2_000, []int{128, 256}
	p.DrainOrders, p.DrainRate, p.DrainPayTimeout = 2_000, 2_000, 10*time.Second
	p.RoomBuyers, p.RoomStock, p.RoomArrival, p.RoomSockets = 2_000, 200, 2*time.Second, 20
	p.DrawEntries, p.DrawUnits, p.DrawReserve, p.DrawSockets = 2_000, 100, 50, 20
	p.CeilingRequests = 20_000
	// A smoke run checks that every scenario runs and audits, on whatever
	// machine: a slow or loaded one answers late, never wrongly, so a
	// request is only given up (an error in the audit) after 30 s.
	p.Timeout = 30 * time.Second
	return p
}

// Validate returns "invalid config: ..." for parameters that cannot run.
func (p Params) Validate() error {
	var errs []error
	if p.Users < 1 || p.UserBase < 0 || p.Shards < 1 || p.Timeout <= 0 {
		errs = append(errs, errors.New("users, shards and timeout must be positive"))
	}
	if p.SpikeBuyers < 1 || p.SpikeStock < 1 || p.SpikeRate <= 0 {
		errs = append(errs, errors.New("spike buyers, stock and rate must be positive"))
	}
	if p.SustainedStock < 1 || len(p.SustainedRates) == 0 || p.SustainedStep <= 0 || p.SustainedWarmup < 0 || p.SustainedP99 <= 0 {
		errs = append(errs, errors.New("sustained stock, rates, step and p99 limit must be positive"))
	}
	for _, r := range append(p.SustainedRates, p.BaselineRates...) {
		if r <= 0 {
			errs = append(errs, fmt.Errorf("sustained rate %v is not positive", r))
		}
	}
	if p.SoldOutStock < 1 || p.SoldOutRate <= 0 || p.SoldOutDuration <= 0 || p.SoldOutWarmup < 0 {
		errs = append(errs, errors.New("soldout stock, rate and duration must be positive"))
	}
	if p.DuplicateKeys < 1 || p.DuplicateReplays < 1 || p.DuplicateBurst < 1 || p.DuplicateRate <= 0 {
		errs = append(errs, errors.New("duplicate keys, replays, burst and rate must be positive"))
	}
	if p.ClosedConns < 1 || p.ClosedDuration <= 0 || p.ReplayKeys < 1 {
		errs = append(errs, errors.New("closed-loop connections, duration and replay keys must be positive"))
	}
	for _, c := range p.TicketConns {
		if c < 1 {
			errs = append(errs, fmt.Errorf("tickets connection count %d is not positive", c))
		}
	}
	if p.E2ERate <= 0 || p.E2EDuration <= 0 || p.E2EPoll <= 0 {
		errs = append(errs, errors.New("e2e rate, duration and poll must be positive"))
	}
	if p.DrainOrders < 1 || p.DrainRate <= 0 || p.DrainPayTimeout < time.Second || len(p.DrainDesigns) == 0 {
		errs = append(errs, errors.New("drain orders, rate and designs must be positive, the drain pay timeout at least 1s"))
	}
	for _, n := range p.DrainProducts {
		if n < 1 || n > 64 {
			errs = append(errs, fmt.Errorf("drain product count %d not in 1…64", n))
		}
	}
	if len(p.DrainProducts) == 0 {
		errs = append(errs, errors.New("drain product counts: at least one"))
	}
	for _, d := range p.DrainDesigns {
		if d != DesignWriter && d != DesignBatch {
			errs = append(errs, fmt.Errorf("drain design %q is neither %s nor %s", d, DesignWriter, DesignBatch))
		}
	}
	if p.RoomBuyers < 1 || p.RoomStock < 1 || p.RoomArrival <= 0 || p.RoomSockets < 0 || p.RoomSockets > p.RoomBuyers {
		errs = append(errs, errors.New("waitingroom buyers, stock and arrival must be positive, sockets from 0 to the buyers"))
	}
	if p.RoomTarget <= 0 {
		errs = append(errs, errors.New("waitingroom target backlog must be positive"))
	}
	if p.DrawEntries < 1 || p.DrawUnits < 1 || p.DrawReserve < 0 || p.DrawSockets < 0 || p.DrawSockets > p.DrawEntries {
		errs = append(errs, errors.New("draw entries and units must be positive, reserve at least 0, sockets from 0 to the entries"))
	}
	if p.CeilingRequests < 1 || p.CeilingClients < 1 {
		errs = append(errs, errors.New("ceiling requests and clients must be positive"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid config: bench: %w", errors.Join(errs...))
	}
	return nil
}

// run is one benchmark run's shared state.
type run struct {
	env   Env
	p     Params
	id    string // prefix of every requestId of this run
	users *users
	log   io.Writer
	// levels: every target runs SustainedRates (Options.Levels).
	levels bool
	// meter reads the CPU time of this process and the servers' (cpuMeter).
	meter *cpuMeter
}

// cpuMeter is the run's meter of CPU time, found (a scan of /proc) on the
// first call.
func (r *run) cpuMeter() *cpuMeter {
	if r.meter == nil {
		r.meter = newCPUMeter(r.env.Servers)
	}
	return r.meter
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.log, format+"\n", args...)
}

type scenarioFunc func(ctx context.Context, r *run, t *target) *ScenarioResult

var scenarioFuncs = map[string]scenarioFunc{
	Spike:     runSpike,
	Sustained: runSustained,
	SoldOut:   runSoldOut,
	Duplicate: runDuplicate,
	Replay:    runReplay, // replay.go
	E2E:       runE2E,
	Drain:     runDrain,
	// waitingroom.go
	WaitingRoom: runWaitingRoom,
	// drops.go
	Tickets: runTickets,
	Draw:    runDraw,
}

// ParseScenarios splits a comma-separated list ("" or "all" = All) and
// checks the names.
func ParseScenarios(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return slices.Clone(All), nil
	}
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(All, name) {
			return nil, fmt.Errorf("unknown scenario %q (scenarios: %s)", name, strings.Join(All, ","))
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no scenario selected")
	}
	return out, nil
}

// Run issues the buyers' tokens, then runs the selected scenarios against
// every target in turn (each scenario audited before the next starts) and
// the redis-benchmark ceiling. The returned report is complete even when a
// scenario or an audit failed; Report.Pass tells. The error is for runs that
// could not start (bad options, gateway not ready) or were cancelled.
func Run(ctx context.Context, env Env, opts Options) (*Report, error) {
	if env.Redis == nil || env.Store == nil || len(env.JWTSecret) == 0 {
		return nil, errors.New("bench: Redis, MySQL store and JWT secret are required")
	}
	if env.Log == nil {
		env.Log = io.Discard
	}
	if env.IdleWait == 0 {
		env.IdleWait = 10 * time.Minute
	}
	selected, err := opts.check()
	if err != nil {
		return nil, err
	}
	var targets []*target
	defer func() {
		for i := len(targets) - 1; i >= 0; i-- {
			targets[i].closeIdle()
		}
	}()
	for i, t := range opts.Targets {
		tg, err := newTarget(t)
		if err != nil {
			return nil, err
		}
		tg.index = i
		targets = append(targets, tg)
	}

	p := opts.Params
	r := &run{env: env, p: p, id: newRunID(), log: env.Log, levels: opts.Levels}
	rep := &Report{
		RunID: r.id, Started: time.Now().UTC(), Quick: p.Quick, Params: p, Command: opts.Command,
		Machine: machineInfo(ctx, env.Redis, env.Store), Scenarios: selected, Levels: opts.Levels,
	}
	for _, t := range targets {
		rep.Targets = append(rep.Targets, t.Target)
	}
	for _, t := range targets {
		if err := t.api.waitReady(ctx, 30*time.Second); err != nil {
			return nil, fmt.Errorf("bench: %s gateway at %s: %w", t.Label, t.URL, err)
		}
	}
	if len(selected) > 0 {
		if err := r.issueTokens(selected); err != nil {
			return nil, err
		}
	}
	for _, t := range targets {
		if err := r.runTarget(ctx, rep, t, selected, opts.RedisCommands); err != nil {
			return rep.finish(), err
		}
	}
	if opts.Ceiling {
		rep.Ceiling = runCeiling(ctx, env, p)
		if rep.Ceiling != nil {
			r.logf("== redis-benchmark ceiling: %s", rep.Ceiling.line())
		}
	}
	return rep.finish(), ctx.Err()
}

// check validates opts and returns the scenarios to run, in their fixed
// order (All's).
func (opts Options) check() ([]string, error) {
	if err := opts.Params.Validate(); err != nil {
		return nil, err
	}
	if len(opts.Targets) == 0 || (len(opts.Targets) > 2 && !opts.Levels) {
		return nil, errors.New("bench: one target, plus at most one baseline (or one per durability level)")
	}
	for i, t := range opts.Targets {
		if opts.Levels && t.Durability == "" {
			return nil, fmt.Errorf("bench: target %s has no durability level", t.Label)
		}
		for _, u := range opts.Targets[:i] {
			if u.Label == t.Label {
				return nil, errors.New("bench: the targets need different labels")
			}
		}
	}
	names := opts.Scenarios
	if names == nil {
		names = All
	}
	var selected []string
	for _, n := range All { // run order is fixed
		if slices.Contains(names, n) {
			selected = append(selected, n)
		}
	}
	for _, n := range names {
		if !slices.Contains(All, n) {
			return nil, fmt.Errorf("bench: unknown scenario %q", n)
		}
	}
	return selected, nil
}

// issueTokens issues the buyers' tokens: Params.Users, or more when a
// selected scenario needs more buyers (spike, waitingroom, draw).
func (r *run) issueTokens(selected []string) error {
	p := r.p
	n := p.Users
	if slices.Contains(selected, Spike) {
		n = max(n, p.SpikeBuyers)
	}
	if slices.Contains(selected, WaitingRoom) {
		n = max(n, p.RoomBuyers)
	}
	if slices.Contains(selected, Draw) {
		n = max(n, p.DrawEntries)
	}
	t0 := time.Now()
	u, err := issueUsers(r.env.JWTSecret, n, p.UserBase)
	if err != nil {
		return err
	}
	r.users = u
	r.logf("bench %s: issued %d buyer tokens in %s", r.id, n, time.Since(t0).Round(time.Millisecond))
	return nil
}

// runTarget prepares t, warms it up and runs the selected scenarios against
// it, adding their results to rep. The scenarios of the system under
// test's pipeline (drain, waitingroom, tickets, draw) run only on the first
// target. The error is a failed Prepare or ctx's.
func (r *run) runTarget(ctx context.Context, rep *Report, t *target, selected []string, redisCommands bool) error {
	if t.Prepare != nil {
		if err := t.Prepare(ctx); err != nil {
			return fmt.Errorf("bench: prepare %s: %w", t.Label, err)
		}
	}
	if len(selected) > 0 {
		r.warmUp(ctx, t)
	}
	for _, name := range selected {
		if err := ctx.Err(); err != nil {
			return err
		}
		if (name == Drain || name == WaitingRoom || name == Tickets || name == Draw) && t.index > 0 {
			continue // the drain pauses the system under test's pipeline, the room is its pacer's: no baseline
		}
		res := r.runScenario(ctx, t, name, redisCommands)
		rep.Results = append(rep.Results, res)
		r.logf("   %s", res.line())
	}
	return nil
}

// runScenario runs scenario name against t and completes its result: its
// labels, timing, the gateway's memory and, with redisCommands, the Redis
// commands per order.
func (r *run) runScenario(ctx context.Context, t *target, name string, redisCommands bool) *ScenarioResult {
	r.logf("== %s against %s (%s)", name, t.Label, t.URL)
	mem := startMemory(t.Target)
	var cmds map[string]int64
	if redisCommands {
		cmds = r.commandStats(ctx)
	}
	started := time.Now()
	res := scenarioFuncs[name](ctx, r, t)
	if redisCommands {
		r.commandsPerOrder(ctx, res, cmds) // durability.go
	}
	res.Scenario, res.Target = name, t.Label
	res.Started = started.UTC()
	res.ElapsedS = time.Since(started).Seconds()
	res.Memory = mem.stop()
	res.finish()
	return res
}

func newRunID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// target is a Target with its API client.
type target struct {
	Target
	index  int // position in Options.Targets
	addr   string
	api    *api
	client *fasthttp.HostClient // shared by every load run, so connections stay warm
}

func newTarget(t Target) (*target, error) {
	if t.Label == "" {
		return nil, errors.New("bench: target without a label")
	}
	addr, err := hostPort(t.URL)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", t.Label, err)
	}
	return &target{Target: t, addr: addr, api: newAPI(addr)}, nil
}

// closeIdle closes the target's idle connections; their cleaner goroutines
// end within a second.
func (t *target) closeIdle() {
	if t.client != nil {
		t.client.CloseIdleConnections()
	}
	t.api.client.CloseIdleConnections()
}

// maxWorkers bounds the workers (and connections) of every load run.
const maxWorkers = 1024

// loadConfig is the base loadgen configuration for t.
func (r *run) loadConfig(t *target) loadgen.Config {
	if t.client == nil {
		t.client = loadgen.NewClient(t.addr, maxWorkers, r.p.Timeout)
	}
	return loadgen.Config{Addr: t.addr, Timeout: r.p.Timeout, Classify: orderClass, Client: t.client}
}

// warmUp opens connections and wakes the gateway with GET /healthz at 1,000/s
// for a second (a quarter with Quick) before the first scenario on t.
func (r *run) warmUp(ctx context.Context, t *target) {
	cfg := r.loadConfig(t)
	cfg.Rate, cfg.Duration, cfg.Classify = 1000, time.Second, nil
	if r.p.Quick {
		cfg.Duration = 250 * time.Millisecond
	}
	cfg.Build = func(_ int64, req *fasthttp.Request) { req.SetRequestURI("/healthz") }
	res, err := loadgen.Run(ctx, cfg)
	if err != nil || res == nil {
		r.logf("   warm-up: %v", err)
		return
	}
	r.logf("   warm-up: %d GET /healthz, classes %v, p99 %s", res.Sent, res.ClassNames(), fmtMs(res.Latency.P99))
}
