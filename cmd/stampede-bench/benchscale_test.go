package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/stampede-sh/stampede/app"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/bench"
	"github.com/stampede-sh/stampede/bench/loadgen"
)

func TestBenchScaleRefusesBadPairs(t *testing.T) {
	for _, pairs := range []string{"0", "x", "1,17", "1,,2"} {
		err := runBenchScale(context.Background(), []string{"--pairs", pairs}, &bytes.Buffer{})
		if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "--pairs") {
			t.Errorf("--pairs %s: %v", pairs, err)
		}
	}
}

// The report compares every run with the first, scenario by scenario, and
// accounts the CPU per component and the rest.
func TestScaleMarkdownComparesWithTheBaseline(t *testing.T) {
	run := func(n int, v float64, p99 float64) scaleRun {
		return scaleRun{label: fmt.Sprintf("%d pairs", n), rep: &bench.Report{
			Machine: bench.Machine{CPU: "test cpu", Cores: 2},
			Results: []*bench.ScenarioResult{{Scenario: "sustained", Pass: true,
				Headline:        bench.Figure{Name: "accepted intake", Value: v, Unit: "orders/s"},
				HeadlineLatency: loadgen.Summary{P50: 1, P95: 2, P99: p99}}},
		}, cpu: cpuSample{wall: 10 * time.Second, busy: 19, all: 20,
			parts: map[string]float64{"gateway+writer pairs": 5, "Redis": 4}}}
	}
	md := scaleMarkdown([]scaleRun{run(1, 2000, 9), run(2, 3000, 12)}, "stampede bench-scale --pairs 1,2")
	for _, want := range []string{
		"Command: `stampede bench-scale --pairs 1,2`",
		"| sustained | 1 pairs | 2,000 orders/s (accepted intake) | 1.00 ms | 2.00 ms | 9.00 ms | baseline | PASS |",
		"| sustained | 2 pairs | 3,000 orders/s (accepted intake) | 1.00 ms | 2.00 ms | 12.00 ms | 1.50× | PASS |",
		"| 1 pairs | 10 s | 95% | 5.0 s (25%) | 0.0 s (0%) | 4.0 s (20%) |",
		"10.0 s (50%) |", // everything else: 19 busy - 9 accounted
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
