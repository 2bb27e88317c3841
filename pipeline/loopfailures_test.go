package pipeline_test

import (
	"database/sql"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// unreachableMySQL is a Store on a closed port: every statement fails at
// once (connection refused), the cheapest "MySQL down".
func unreachableMySQL(t *testing.T) *persistence.Store {
	t.Helper()
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/nowhere?timeout=200ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &persistence.Store{DB: db}
}

// loopFailuresWhileDown runs a loop for d against an unreachable MySQL and
// checks that it backed off and logged bounded: one line starting with
// prefix, at least 3 failures counted in stampede_loop_failures_total{loop}
// and at most most (a loop retrying every tick fails ~d/tick times).
func loopFailuresWhileDown(t *testing.T, lines *atomic.Int64, failures func() float64, stop func(), d time.Duration, most float64) {
	t.Helper()
	pipelinetest.WaitFor(t, 30*time.Second, "three failed rounds", func() (bool, string) {
		n := failures()
		return n >= 3, fmt.Sprintf("%v failures", n)
	})
	time.Sleep(d)
	stop()
	n := failures()
	if lines.Load() != 1 || n > most {
		t.Fatalf("%d log lines and %v failures counted, want 1 line and at most %v failures (backoff)", lines.Load(), n, most)
	}
	t.Logf("%v failed rounds, 1 log line", n)
}

// With MySQL down the sweeper's close pass backs off from Interval (10 ms)
// to ErrorBackoff (400 ms): in ~2 s it fails about 10 times, not 200, and
// logs one line for all of them; the rest are counted
// (stampede_loop_failures_total{loop="sweeper_close"}). One close worker
// here: each of Workers close loops backs off and logs on its own (one line
// per worker and state change).
func TestSweeperBacksOffWhileMySQLIsDown(t *testing.T) {
	var lines atomic.Int64
	e := &env{t: t}
	m, preg := e.metrics()
	s, err := pipeline.NewSweeper(unreachableMySQL(t), pipeline.SweeperConfig{Interval: 10 * time.Millisecond,
		ErrorBackoff: 400 * time.Millisecond, Workers: 1, Metrics: m, Logger: slog.New(lineCounter{prefix: "sweeper: close pass", n: &lines})})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, "sweeper (mysql down)", s.Run)
	loopFailuresWhileDown(t, &lines, func() float64 {
		return pipelinetest.Metric(t, preg, "stampede_loop_failures_total", "loop", "sweeper_close")
	}, stop, 2*time.Second, 25)
}

// With MySQL down a relay (its broker up, its channel open) backs off its
// claims from PollInterval (10 ms) to ErrorBackoff (400 ms) and logs one
// line for the whole outage; the rest are counted
// (stampede_loop_failures_total{loop="relay_claim"}).
func TestRelayClaimBacksOffWhileMySQLIsDown(t *testing.T) {
	e := newEnv(t)
	var lines atomic.Int64
	m, reg := e.metrics()
	r, err := pipeline.NewRelay(unreachableMySQL(t), e.conn(), pipeline.RelayConfig{PollInterval: 10 * time.Millisecond,
		ErrorBackoff: 400 * time.Millisecond, Metrics: m, Logger: slog.New(lineCounter{prefix: "relay: claim outbox", n: &lines})})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, "relay (mysql down)", r.Run)
	loopFailuresWhileDown(t, &lines, func() float64 {
		return pipelinetest.Metric(t, reg, "stampede_loop_failures_total", "loop", "relay_claim")
	}, stop, 2*time.Second, 25)
}
