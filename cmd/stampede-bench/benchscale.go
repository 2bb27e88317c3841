package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/stampede-sh/stampede/app"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stampede-sh/stampede/bench"
	"github.com/stampede-sh/stampede/persistence"
)

// runBenchScale is `stampede bench-scale`: the same benchmark scenarios
// against 1, 2, … gateway+writer pairs, each pair its own `stampede serve
// --roles gateway,writer` process, with one shared process running the relay,
// consumers and sweeper. The pairs are started one after the other, so the
// run with n pairs has exactly n gateways and n writers alive; the load
// generator spreads its requests over the n gateways (round-robin
// connections). The first count is the baseline the others are compared
// with; the report also gives each component's share of the machine's CPU,
// which says where the capacity went.
func runBenchScale(ctx context.Context, args []string, stdout io.Writer) error {
	s, err := newScaleBench(args, stdout)
	if err != nil {
		return err
	}
	if s.exe, err = os.Executable(); err != nil {
		return err
	}
	store, err := persistence.Open(ctx, s.cfg.MySQLDSN)
	if err != nil {
		return err
	}
	defer store.Close()
	if _, err := persistence.Migrate(ctx, store.DB); err != nil {
		return err
	}
	rdb := app.NewRedis(s.cfg)
	defer rdb.Close()
	s.env = bench.Env{Redis: rdb, Store: store, JWTSecret: []byte(s.cfg.JWTSecret), Log: stdout, IdleWait: s.idleWait}

	defer func() {
		for _, p := range s.procs {
			p.stop()
		}
	}()
	if s.pipe, err = s.start("pipeline", "relay,consumer,sweeper", "127.0.0.1:0"); err != nil {
		return err
	}
	runs := make([]scaleRun, 0, len(s.counts))
	for run, n := range s.counts {
		r, err := s.measure(ctx, run, n)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	return writeScaleReport(runs, args, s.f.out, stdout)
}

// scaleBench is one `stampede bench-scale`: its flags and settings and the
// `stampede serve` children it started (procs: the pipeline process and
// every pair, stopped at the end).
type scaleBench struct {
	f         benchFlags
	cfg       *app.Config
	stdout    io.Writer
	counts    []int // --pairs
	basePort  int
	scenarios []string
	params    bench.Params
	idleWait  time.Duration
	exe       string    // this binary, run as the children
	env       bench.Env // the load generator's and audit's
	procs     []*scaleProc
	pipe      *scaleProc   // relay, consumer, sweeper
	pairs     []*scaleProc // gateway+writer pairs running now
}

// newScaleBench parses bench-scale's flags and settings. Errors wrap
// app.ErrUsage for bad flags.
func newScaleBench(args []string, stdout io.Writer) (*scaleBench, error) {
	s := &scaleBench{stdout: stdout}
	var pairsFlag string
	cfg, err := app.Parse("bench-scale", args, func(fs *flag.FlagSet) {
		fs.StringVar(&pairsFlag, "pairs", "1,2", "comma-separated gateway+writer pair counts to measure, in order (e.g. 1,2,2,1 to see the order's effect); the first is the baseline")
		fs.IntVar(&s.basePort, "base-port", 8180, "pair i's gateway listens on 127.0.0.1:<base-port+i>")
		fs.StringVar(&s.f.scenarios, "scenarios", bench.Spike+","+bench.Sustained, "comma-separated scenarios: "+strings.Join(bench.All, ","))
		s.f.registerScenarioFlags(fs)
	})
	if err != nil {
		return nil, err
	}
	s.cfg = cfg
	for _, p := range strings.Split(pairsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 16 {
			return nil, fmt.Errorf("%w: --pairs %q: want counts 1…16", app.ErrUsage, pairsFlag)
		}
		s.counts = append(s.counts, n)
	}
	if s.scenarios, s.params, s.idleWait, err = s.f.resolve(); err != nil {
		return nil, err
	}
	return s, nil
}

// start starts a child `stampede serve --roles roles` and adds it to procs.
func (s *scaleBench) start(name, roles, httpAddr string) (*scaleProc, error) {
	p, err := startScaleProc(s.exe, s.cfg, name, roles, httpAddr)
	if err == nil {
		s.procs = append(s.procs, p)
	}
	return p, err
}

// resize stops the last pairs (SIGTERM: their writers drain) or starts new
// ones until n run.
func (s *scaleBench) resize(n int) error {
	for len(s.pairs) > n {
		last := s.pairs[len(s.pairs)-1]
		last.stop()
		last.stopped = true
		s.pairs = s.pairs[:len(s.pairs)-1]
	}
	for len(s.pairs) < n {
		i := len(s.pairs)
		p, err := s.start(fmt.Sprintf("pair-%d", i+1), "gateway,writer", fmt.Sprintf("127.0.0.1:%d", s.basePort+i))
		if err != nil {
			return err
		}
		s.pairs = append(s.pairs, p)
	}
	return nil
}

// measure runs the scenarios with n pairs (run: its index in --pairs),
// writes that run's report and accounts the CPU each component used. An
// error if the run failed or a child exited during it.
func (s *scaleBench) measure(ctx context.Context, run, n int) (scaleRun, error) {
	if err := s.resize(n); err != nil {
		return scaleRun{}, err
	}
	urls := make([]string, n)
	for i, p := range s.pairs {
		urls[i] = "http://" + p.httpAddr
	}
	label := fmt.Sprintf("%d pair", n)
	if n > 1 {
		label += "s"
	}
	label += fmt.Sprintf(" (run %d)", run+1)
	fmt.Fprintf(s.stdout, "== %s: %d × (gateway+writer) + 1 × (relay, consumer, sweeper)\n", label, n)
	cpu0 := sampleCPU(s.pipe, s.pairs)
	rep, err := bench.Run(ctx, s.env, bench.Options{
		Scenarios: s.scenarios, Params: s.params,
		Targets: []bench.Target{{Label: label, URL: strings.Join(urls, ","), GatewayPID: s.pairs[0].cmd.Process.Pid}},
	})
	cpu := sampleCPU(s.pipe, s.pairs).since(cpu0)
	if rep != nil && len(rep.Results) > 0 {
		if _, md, werr := rep.WriteFiles(s.f.out); werr == nil {
			fmt.Fprintf(s.stdout, "report: %s\n", md)
		}
	}
	if err != nil {
		return scaleRun{}, fmt.Errorf("bench-scale: %s: %w", label, err)
	}
	for _, p := range s.procs {
		if !p.stopped && !p.alive() {
			return scaleRun{}, fmt.Errorf("bench-scale: %s exited during the run:\n%s", p.name, p.logs.String())
		}
	}
	return scaleRun{label: label, rep: rep, cpu: cpu}, nil
}

// writeScaleReport writes the comparison of runs to <out>/<time>-scale.md
// and prints it; an error if a run did not pass.
func writeScaleReport(runs []scaleRun, args []string, out string, stdout io.Writer) error {
	md := scaleMarkdown(runs, "stampede bench-scale "+strings.Join(args, " "))
	path := filepath.Join(out, time.Now().UTC().Format("2006-01-02T150405Z")+"-scale.md")
	if err := os.MkdirAll(out, 0o755); err == nil {
		if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\n%s\nreport: %s\n", md, path)
	for _, r := range runs {
		if !r.rep.Pass {
			return errors.New("bench-scale: a scenario FAILED its audit or could not run (see the reports)")
		}
	}
	return nil
}

// scaleProc is one `stampede serve` child of bench-scale.
type scaleProc struct {
	stopped  bool // stopped on purpose (fewer pairs in a later run)
	name     string
	httpAddr string
	cmd      *exec.Cmd
	logs     *tailBuffer
	exited   chan struct{}
}

// startScaleProc starts `exe serve --roles roles` with every setting of cfg
// and waits until its gateway (if any) answers /readyz, or 1s for other
// roles.
func startScaleProc(exe string, cfg *app.Config, name, roles, httpAddr string) (*scaleProc, error) {
	args := []string{"serve", "--roles", roles, "--http-addr", httpAddr, "--node-id", "-1", "--metrics-addr", "", "--pprof-addr", "",
		"--log-level", "warn", "--migrate=false"}
	p := &scaleProc{name: name, httpAddr: httpAddr, cmd: exec.Command(exe, args...), logs: &tailBuffer{max: 8 << 10}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.Env = append(os.Environ(), app.SettingEnv(cfg)...) // later entries win
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench-scale: start %s: %w", name, err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	if !strings.Contains(roles, "gateway") {
		time.Sleep(time.Second)
		if !p.alive() {
			return nil, fmt.Errorf("bench-scale: %s exited at start:\n%s", name, p.logs.String())
		}
		return p, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-p.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := app.WaitReady(ctx, "http://"+httpAddr, 30*time.Second) // demo.go
	cancel()
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("bench-scale: %s not ready: %v\n%s", name, err, p.logs.String())
	}
	return p, nil
}

func (p *scaleProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM (the roles drain) and waits, SIGKILL after 30s.
func (p *scaleProc) stop() {
	if !p.alive() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// ---- CPU accounting ---------------------------------------------------------

// cpuSample is CPU seconds (user+system) per component, and the machine's
// total busy and elapsed CPU seconds, from /proc.
type cpuSample struct {
	at        time.Time
	wall      time.Duration // of a difference (since)
	parts     map[string]float64
	busy, all float64
}

// cpuComponents names the processes a sample accounts, by /proc/<pid>/comm.
var cpuComponents = map[string]string{"redis-server": "Redis", "mariadbd": "MariaDB", "mysqld": "MariaDB", "beam.smp": "RabbitMQ"}

func sampleCPU(pipe *scaleProc, pairs []*scaleProc) cpuSample {
	s := cpuSample{at: time.Now(), parts: map[string]float64{}}
	s.parts["load generator + audit (bench-scale)"] = procCPU(os.Getpid())
	for _, p := range pairs {
		s.parts["gateway+writer pairs"] += procCPU(p.cmd.Process.Pid)
	}
	s.parts["relay+consumer+sweeper"] = procCPU(pipe.cmd.Process.Pid)
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err != nil {
				continue
			}
			if name, ok := cpuComponents[strings.TrimSpace(string(comm))]; ok {
				s.parts[name] += procCPU(pid)
			}
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, v := range f[1:] {
			x, _ := strconv.ParseFloat(v, 64)
			s.all += x / 100
			if i != 3 && i != 4 { // idle, iowait
				s.busy += x / 100
			}
		}
	}
	return s
}

// since is the difference s - old, per component.
func (s cpuSample) since(old cpuSample) cpuSample {
	d := cpuSample{at: s.at, wall: s.at.Sub(old.at), parts: map[string]float64{}, busy: s.busy - old.busy, all: s.all - old.all}
	for k, v := range s.parts {
		d.parts[k] = v - old.parts[k]
	}
	return d
}

// procCPU is pid's user+system CPU seconds (Linux, USER_HZ 100); 0 if gone.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// ---- report -----------------------------------------------------------------

type scaleRun struct {
	label string
	rep   *bench.Report
	cpu   cpuSample
}

// scaleMarkdown compares the runs scenario by scenario against the first.
func scaleMarkdown(runs []scaleRun, command string) string {
	var b strings.Builder
	b.WriteString("# Stampede scale-out benchmark — gateway+writer pairs\n\n")
	if len(runs) == 0 {
		return b.String()
	}
	m := runs[0].rep.Machine
	fmt.Fprintf(&b, "Command: `%s`\n\n", command)
	fmt.Fprintf(&b, "Machine: %s, %d cores; every process, the services and the load generator share it. ", m.CPU, m.Cores)
	fmt.Fprintf(&b, "Each pair is one `stampede serve --roles gateway,writer` process; one more process runs relay, consumer and sweeper. The baseline is %s, measured in the same run.\n\n", runs[0].label)
	b.WriteString("| scenario | run | headline | p50 | p95 | p99 | vs baseline | audit |\n|---|--:|---|--:|--:|--:|--:|:-:|\n")
	var names []string
	for _, r := range runs {
		for _, s := range r.rep.Results {
			if !slices.Contains(names, s.Scenario) {
				names = append(names, s.Scenario)
			}
		}
	}
	for _, name := range names {
		var base float64
		for i, r := range runs {
			for _, s := range r.rep.Results {
				if s.Scenario != name {
					continue
				}
				v := s.Headline.Value
				if i == 0 {
					base = v
				}
				ratio := "baseline"
				if i > 0 && base > 0 {
					ratio = fmt.Sprintf("%.2f×", v/base)
				}
				l := s.HeadlineLatency
				audit := "FAIL"
				if s.Pass {
					audit = "PASS"
				}
				fmt.Fprintf(&b, "| %s | %s | %s %s (%s) | %.2f ms | %.2f ms | %.2f ms | %s | %s |\n",
					name, r.label, fmtFloat(v), s.Headline.Unit, s.Headline.Name, l.P50, l.P95, l.P99, ratio, audit)
			}
		}
	}
	b.WriteString("\n## Where the CPU went\n\nCPU seconds used during each run (user+system from /proc), and the share of the machine's capacity (cores × wall time) each took.\n\n")
	b.WriteString("| run | wall | machine busy | ")
	comps := []string{"gateway+writer pairs", "relay+consumer+sweeper", "Redis", "MariaDB", "RabbitMQ", "load generator + audit (bench-scale)"}
	for _, c := range comps {
		b.WriteString(c + " | ")
	}
	b.WriteString("everything else (kernel, other processes) |\n|--:|--:|--:|" + strings.Repeat("--:|", len(comps)+1) + "\n")
	for _, r := range runs {
		wall := r.cpu.wall.Seconds()
		capacity := wall * float64(max(m.Cores, 1))
		busy := 0.0
		if r.cpu.all > 0 {
			busy = 100 * r.cpu.busy / r.cpu.all
		}
		fmt.Fprintf(&b, "| %s | %.0f s | %.0f%% | ", r.label, wall, busy)
		accounted := 0.0
		for _, c := range comps {
			accounted += r.cpu.parts[c]
			fmt.Fprintf(&b, "%.1f s (%.0f%%) | ", r.cpu.parts[c], 100*r.cpu.parts[c]/capacity)
		}
		other := max(r.cpu.busy-accounted, 0)
		fmt.Fprintf(&b, "%.1f s (%.0f%%) |\n", other, 100*other/capacity)
	}
	return b.String()
}

// fmtFloat prints v with thousands separators and no decimals (or one
// decimal below 100).
func fmtFloat(v float64) string {
	if v < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	s := strconv.FormatInt(int64(v+0.5), 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
