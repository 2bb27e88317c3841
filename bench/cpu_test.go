package bench

import (
	"crypto/sha256"
	"math"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/bench/loadgen"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a parenthesis, utime 250 and stime 50 ticks.
	line := "4242 (redis (x) y) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 4 0 100 1000 10"
	got, err := parseStatCPU([]byte(line))
	if err != nil || got != 3.0 {
		t.Fatalf("parseStatCPU: %v %v, want 3 s", got, err)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Fatal("a short stat line parsed")
	}
}

func TestListeningInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0 100 0 0 10 0
   1: 0100007F:18EB 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0 20 4 30 10 -1
   2: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3333 1 0 100 0 0 10 0
`
	got := listeningInodes([]byte(table), 6379)
	if len(got) != 1 || got[0] != "1111" {
		t.Fatalf("listening inodes on 6379: %v, want [1111] (not the connected socket 2222, not port 3306's 3333)", got)
	}
}

// TestCPUMeterFindsListener: the meter finds this very process by a port
// it listens on and reads a CPU time that grows with work done.
func TestCPUMeterFindsListener(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if pid := listenerPID(l.Addr().String()); pid != os.Getpid() {
		t.Fatalf("listenerPID(%s) = %d, want this process %d", l.Addr(), pid, os.Getpid())
	}
	if pid := listenerPID("192.0.2.1:6379"); pid != 0 {
		t.Fatalf("a remote address resolved to pid %d", pid)
	}
	m := newCPUMeter(map[string]string{"redis": l.Addr().String(), "mysql": "192.0.2.1:3306"})
	if got := strings.Join(m.names(), ","); got != "stampede,redis" {
		t.Fatalf("meter processes %s, want stampede,redis", got)
	}
	before := m.sample()
	sum := sha256.Sum256(nil)
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		sum = sha256.Sum256(sum[:]) // work that shows in the process's CPU time
	}
	after := m.sample()
	if after[0] <= before[0] {
		t.Fatalf("CPU time did not grow over 300 ms of work: %v → %v", before, after)
	}
	st := cpuStep{phase: "x", accepted: 1000, seconds: []float64{after[0] - before[0], -1}}
	ms := st.perOrderMs()
	if ms[1] != -1 || ms[2] != ms[0] {
		t.Fatalf("per order %v: an unread process must be left out of the total", ms)
	}
	tb := cpuTable(m.names(), []cpuStep{st, {phase: "y"}})
	if len(tb.Rows) != 2 || tb.Rows[0][3] != "–" || tb.Rows[1][2] != "–" {
		t.Fatalf("cpu table rows %v", tb.Rows)
	}
}

// TestCPUFigures: each series' highest clean step gives its CPU per order
// and the cores in use at it (CPU per order × its 202 rate).
func TestCPUFigures(t *testing.T) {
	step := func(rate float64) *loadgen.Result {
		return &loadgen.Result{Classes: map[string]*loadgen.ClassStats{classAccepted: {Rate: rate}}}
	}
	l := &cpuLog{meter: &cpuMeter{procs: []cpuProc{{name: "stampede"}}}, steps: []cpuStep{
		{phase: "intake alone: 2,000/s", accepted: 2000, seconds: []float64{0.3}},
		{phase: "2,000/s", accepted: 2000, seconds: []float64{0.6}},
	}}
	full := &stepper{best: &Phase{Name: "2,000/s", Result: step(2000)}}
	alone := &stepper{label: intakeAloneLabel, best: &Phase{Name: "intake alone: 2,000/s", Result: step(2000)}}
	s := &ScenarioResult{}
	l.figures(s, full, alone)
	want := map[string]float64{
		"CPU per order at the highest clean step (every process measured)":                    300,
		"cores in use at the highest clean step (every process measured)":                     0.6,
		intakeAloneLabel + "CPU per order at the highest clean step (every process measured)": 150,
		intakeAloneLabel + "cores in use at the highest clean step (every process measured)":  0.3,
	}
	for name, v := range want {
		got, ok := s.Figure(name)
		if !ok || math.Abs(got-v) > 1e-9 {
			t.Errorf("%s: %v (%v), want %v", name, got, ok, v)
		}
	}
	if len(s.Tables) != 1 || len(s.Tables[0].Rows) != 2 {
		t.Fatalf("cpu table: %+v", s.Tables)
	}
}
