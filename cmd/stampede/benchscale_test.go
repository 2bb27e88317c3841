package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/bench"
	"github.com/stampede-sh/stampede/bench/loadgen"
)

func TestBenchScaleRefusesBadPairs(t *testing.T) {
	for _, pairs := range []string{"0", "x", "1,17", "1,,2"} {
		err := runBenchScale(context.Background(), []string{"--pairs", pairs}, &bytes.Buffer{})
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--pairs") {
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

// A child of bench-scale runs with every setting of its parent.
func TestSettingEnvCarriesEverySetting(t *testing.T) {
	cfg, err := parse("bench-scale", []string{"--amqp-queue-type", "classic", "--consumer-workers", "3", "--pay-timeout", "7s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := settingEnv(cfg)
	flags, _ := settingFlags(t)
	if len(env) != len(flags) {
		t.Errorf("%d variables for %d settings", len(env), len(flags))
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	child, err := parse("serve", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := *child, *cfg
	a.command, a.explicit, b.command, b.explicit = "", nil, "", nil // how it was parsed, not a setting
	if !reflect.DeepEqual(a, b) {
		t.Errorf("child config differs:\n%+v\n%+v", a, b)
	}
	if child.Mode != modeDevelopment {
		t.Errorf("child of bench-scale in mode %q", child.Mode)
	}
	if child.AMQPQueueType != "classic" || child.ConsumerWorkers != 3 || child.PayTimeout != 7*time.Second {
		t.Errorf("child: %+v", *child)
	}
}
