package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"github.com/stampede-sh/stampede/app"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/bench"
	"github.com/stampede-sh/stampede/systest/ports"
)

func TestBenchParseRates(t *testing.T) {
	got, err := parseRates("2000, 4k,1.5K")
	if err != nil || len(got) != 3 || got[0] != 2000 || got[1] != 4000 || got[2] != 1500 {
		t.Fatal(got, err)
	}
	for _, bad := range []string{"", "fast", "-2k", "0"} {
		if _, err := parseRates(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBenchWithoutURLNeedsInProcessStart(t *testing.T) {
	saved := startForBench
	startForBench = nil
	defer func() { startForBench = saved }()
	err := runBench(context.Background(), []string{"--quick"}, &bytes.Buffer{})
	if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "--url") {
		t.Fatalf("err = %v", err)
	}
	if err := runBench(context.Background(), []string{"--url", "http://127.0.0.1:1", "--scenarios", "spike,nope"}, &bytes.Buffer{}); !errors.Is(err, app.ErrUsage) {
		t.Fatalf("unknown scenario: %v", err)
	}
}

// TestBenchQuick runs every scenario shrunk (--quick) against every role
// started in this process, on this package's own databases and vhost, and
// requires every audit to pass. It asserts nothing about speed.
func TestBenchQuick(t *testing.T) {
	t.Parallel() // the test's own databases, vhost and ports
	if testing.Short() {
		t.Skip("end-to-end")
	}
	// A bound for a hung run, not a speed limit: a loaded 2-core machine
	// needs several minutes for the quick run.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	svc := serviceArgs(t)
	var addr string
	for i, a := range svc[:len(svc)-1] {
		if a == "--http-addr" {
			addr = svc[i+1]
		}
	}
	if addr == "" {
		t.Fatal("serviceArgs gives no --http-addr")
	}
	cfg, err := app.Parse("serve", append([]string{"--roles", "gateway,writer,relay,consumer,sweeper", "--migrate"}, svc...), nil)
	if err != nil {
		t.Fatal(err)
	}
	stopApp, err := app.StartInProcess(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stopApp()

	// The synchronous-intake baseline: a second, gateway-only app.
	syncAddr := ports.Addr(t)
	bcfg, err := app.Parse("serve", append(append([]string{"--roles", "gateway"}, svc...), "--intake", "sync", "--http-addr", syncAddr, "--node-id", "11"), nil)
	if err != nil {
		t.Fatal(err)
	}
	stopBaseline, err := app.StartInProcess(ctx, bcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stopBaseline()

	dir := t.TempDir()
	var out bytes.Buffer
	args := append([]string{"--quick", "--url", "http://" + addr, "--gateway-pid", "0", "--out", dir, "--ceiling=false",
		"--baseline-url", "http://" + syncAddr}, svc...)
	err = runBench(ctx, args, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	md, _ := filepath.Glob(filepath.Join(dir, "*.md"))
	js, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(md) != 1 || len(js) != 1 {
		t.Fatalf("report files: %v %v", md, js)
	}
	for _, want := range []string{"| spike | stream |", "| sustained | stream |", "| soldout | stream |", "| duplicate | stream |", "| e2e | stream |",
		"| spike | sync |", "| e2e | sync |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if strings.Contains(out.String(), "FAIL") {
		t.Errorf("a scenario failed")
	}
}

func TestRedactSecrets(t *testing.T) {
	got := strings.Join(redactSecrets([]string{"--quick", "--jwt-secret", "s1", "-payment-secret=s2", "--scenarios", "drain"}), " ")
	if want := "--quick --jwt-secret REDACTED -payment-secret=REDACTED --scenarios drain"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestBenchDurabilityLevelsFlag(t *testing.T) {
	got, err := parseLevels("none, aof,replicated")
	if err != nil || strings.Join(got, ",") != "none,aof,replicated" {
		t.Fatal(got, err)
	}
	for _, bad := range []string{"", ",", "none,none", "none,fsync"} {
		if _, err := parseLevels(bad); !errors.Is(err, app.ErrUsage) {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
	// Refused before any Redis or gateway is started.
	for _, args := range [][]string{
		{"--durability-levels", "none,aof", "--url", "http://127.0.0.1:1"},
		{"--durability-levels", "none,aof", "--baseline-durability", "aof"},
		{"--durability-levels", "none,aof", "--scenarios", "sustained,drain"},
		{"--durability-levels", "none,bogus"},
	} {
		if err := runBench(context.Background(), args, &bytes.Buffer{}); !errors.Is(err, app.ErrUsage) {
			t.Errorf("%v: err = %v", args, err)
		}
	}
	if a, err := levelAddr("127.0.0.1:8090", 2); err != nil || a != "127.0.0.1:8091" {
		t.Errorf("levelAddr = %q, %v", a, err)
	}
}

// TestBenchFlagsOverrideParams: a size flag above 0 replaces its parameter,
// one left at 0 keeps the default (draw-reserve: at -1).
func TestBenchFlagsOverrideParams(t *testing.T) {
	def := bench.DefaultParams()
	f := benchFlags{drawReserve: -1}
	p, err := f.params()
	if err != nil {
		t.Fatal(err)
	}
	if p.Users != def.Users || p.SpikeStock != def.SpikeStock || p.SpikeRate != def.SpikeRate || p.SustainedStep != def.SustainedStep || p.DrawReserve != def.DrawReserve {
		t.Fatalf("zero flags changed the defaults: %+v", p)
	}
	f = benchFlags{users: 7, spikeStock: 8, spikeRate: 9.5, step: 3 * time.Second, drainOrders: 11, roomStock: 12, drawUnits: 13, drawReserve: 0}
	if p, err = f.params(); err != nil {
		t.Fatal(err)
	}
	if p.Users != 7 || p.SpikeStock != 8 || p.SpikeRate != 9.5 || p.SustainedStep != 3*time.Second || p.DrainOrders != 11 || p.RoomStock != 12 || p.DrawUnits != 13 || p.DrawReserve != 0 {
		t.Fatalf("flags not applied: %+v", p)
	}
	if !slices.Equal(p.TicketConns, def.TicketConns) {
		t.Fatalf("ticket connection counts %v without the flag, want the default %v", p.TicketConns, def.TicketConns)
	}
	f = benchFlags{drawReserve: -1, ticketConns: " 64, 2048,"}
	if p, err = f.params(); err != nil || !slices.Equal(p.TicketConns, []int{64, 2048}) {
		t.Fatalf("--ticket-conns ' 64, 2048,': %v, %v", p.TicketConns, err)
	}
	for _, bad := range []string{"0", "64,x", "-1"} {
		f = benchFlags{drawReserve: -1, ticketConns: bad}
		if _, err = f.params(); err == nil || !strings.Contains(err.Error(), "--ticket-conns") {
			t.Fatalf("--ticket-conns %q: %v, want an error naming the flag", bad, err)
		}
	}
}

// --drain-products lists the product counts each design drains over; a bad
// count is a usage error, not a run.
func TestBenchDrainProducts(t *testing.T) {
	parse := func(v string) (bench.Params, error) {
		var f benchFlags
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		f.registerBenchFlags(fs)
		if err := fs.Parse([]string{"--drain-products", v}); err != nil {
			return bench.Params{}, err
		}
		_, p, _, err := f.resolve()
		return p, err
	}
	p, err := parse("1, 16")
	if err != nil || !slices.Equal(p.DrainProducts, []int{1, 16}) {
		t.Fatalf("1,16: %v %v", p.DrainProducts, err)
	}
	if p, err := parse(""); err != nil || !slices.Equal(p.DrainProducts, []int{1}) {
		t.Fatalf("default: %v %v", p.DrainProducts, err)
	}
	for _, bad := range []string{"0", "x", "1,65"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("--drain-products %q accepted", bad)
		}
	}
}
