package bench

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakePipeline records Stop and Start calls.
type fakePipeline struct {
	mu      sync.Mutex
	calls   []string
	stopped bool
}

func (p *fakePipeline) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls, p.stopped = append(p.calls, "stop"), true
}

func (p *fakePipeline) Start(_ context.Context, design string, _ time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls, p.stopped = append(p.calls, "start "+design), false
	return nil
}

func (p *fakePipeline) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// TestSustainedIntakeAloneAgainstAFakeGateway runs sustained with a fake
// in-process pipeline whose orders never leave PROCESSING: the intake-alone
// steps (pipeline stopped) are judged by their answers only and are clean at
// every rate, the full-system steps fail on the backlog at once (twice: the
// second try), so the ratio is 0 and the goal unmet. With a pipeline that keeps up both are
// clean at every rate: ratio 1, flagged as an upper bound.
func TestSustainedIntakeAloneAgainstAFakeGateway(t *testing.T) {
	f := newFake()
	tg := startFake(t, f)
	r := newTestRun(t, f, false)
	ctx := context.Background()
	if err := tg.api.waitReady(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	fp := &fakePipeline{}
	r.env.Pipeline = fp
	r.p.SustainedIntakeAlone = true
	settledWhileStopped := 0
	behind := func(context.Context, int64) (int64, error) {
		if fp.isStopped() {
			settledWhileStopped++
		}
		return math.MinInt32, nil
	}
	r.env.settled = behind

	s := runSustained(ctx, r, tg)
	s.Scenario, s.Target = Sustained, tg.Label
	s.finish()
	if strings.Join(fp.calls, ",") != "stop,start ,stop,start " || settledWhileStopped != 0 {
		t.Fatalf("pipeline calls %v, settled asked %d times while stopped", fp.calls, settledWhileStopped)
	}
	var names []string
	for _, ph := range s.Phases {
		names = append(names, ph.Name)
	}
	// Interleaved rate by rate; the full system's unclean step tried twice.
	if strings.Join(names, ",") != "intake alone: 200/s,200/s,200/s (2nd try),intake alone: 400/s" {
		t.Fatalf("phases %v (%s)", names, s.line())
	}
	if v, _ := s.Figure(figAloneStep); v != 400 {
		t.Errorf("intake-alone highest clean step %v, want 400", v)
	}
	if v, ok := s.Figure(figAloneRatio); !ok || v != 0 {
		t.Errorf("ratio %v (%v), want 0: the full system had no clean step", v, ok)
	}
	rep := &Report{Params: r.p, Targets: []Target{tg.Target}, Results: []*ScenarioResult{s}}
	g := findGoal(rep.goals(), "intake alone")
	if g == nil || g.Met == nil || *g.Met || !strings.HasPrefix(g.Value, "0.00×") {
		t.Errorf("goal %+v, want unmet at 0.00×", g)
	}

	fp.calls = nil
	r.env.settled = func(context.Context, int64) (int64, error) { return math.MaxInt32, nil }
	s = runSustained(ctx, r, tg)
	s.Scenario, s.Target = Sustained, tg.Label
	s.finish()
	if v, _ := s.Figure(figAloneRatio); v != 1 || !s.Pass {
		t.Errorf("keeping-up pipeline: ratio %v, %s", v, s.line())
	}
	if !strings.Contains(strings.Join(s.Notes, "\n"), "upper bound") {
		t.Errorf("notes %q: an intake alone clean at every step must be called an upper bound", s.Notes)
	}

	// Off, or against a baseline target: the steps run once.
	r.p.SustainedIntakeAlone = false
	if s = runSustained(ctx, r, tg); len(s.Phases) != 2 {
		t.Errorf("intake alone off: %d phases, want 2", len(s.Phases))
	}
}

// TestIntakeAloneRatioAndGoal checks the figures and the ≥ 0.6× goal from
// made-up step results.
func TestIntakeAloneRatioAndGoal(t *testing.T) {
	met := func(ok bool) *bool { return ptr(ok) }
	cases := []struct {
		full, alone float64
		over        bool // the intake alone hit a step over the limit
		ratio       float64
		want        *bool // nil: no goal
		upper       bool
	}{
		{full: 3_000, alone: 4_000, over: true, ratio: 0.75, want: ptr(true)},
		{full: 2_000, alone: 4_000, over: true, ratio: 0.5, want: ptr(false)},
		{full: 2_400, alone: 4_000, over: true, ratio: 0.6, want: ptr(true)},
		{full: 0, alone: 4_000, over: true, ratio: 0, want: ptr(false)},
		{full: 6_000, alone: 6_000, ratio: 1, want: ptr(true), upper: true},
		{full: 1_000, alone: 0, over: true}, // no clean intake-alone step: unjudged
	}
	for _, c := range cases {
		s := &ScenarioResult{Pass: true}
		if c.full > 0 {
			s.figure("highest clean step", c.full, "req/s")
		}
		if c.over {
			s.figure(intakeAloneLabel+"first step over the limit", c.alone+1_000, "req/s")
		}
		intakeAloneFigures(s, &aloneResult{step: c.alone, accepted: c.alone})
		goals := intakeAloneGoal(s, met)
		if c.want == nil {
			if len(goals) != 1 || goals[0].Met != nil || !strings.Contains(goals[0].Value, "no ratio") {
				t.Errorf("%+v: goal %+v, want one unjudged", c, goals)
			}
			continue
		}
		if v, _ := s.Figure(figAloneRatio); math.Abs(v-c.ratio) > 1e-9 {
			t.Errorf("%+v: ratio %v", c, v)
		}
		if len(goals) != 1 || *goals[0].Met != *c.want || goals[0].Target != "≥ 0.6×" {
			t.Errorf("%+v: goals %+v", c, goals)
		}
		if got := strings.Contains(strings.Join(s.Notes, " "), "upper bound"); got != c.upper {
			t.Errorf("%+v: upper-bound note %v", c, got)
		}
		// A failed audit fails the goal whatever the ratio.
		s.Pass = false
		if g := intakeAloneGoal(s, met); *g[0].Met {
			t.Errorf("%+v: goal met with a failed scenario", c)
		}
	}
	// No intake-alone run: no goal.
	if g := intakeAloneGoal(&ScenarioResult{Pass: true}, met); len(g) != 0 {
		t.Errorf("goal %+v without an intake-alone run", g)
	}
	// A quick run claims nothing.
	s := &ScenarioResult{Pass: true}
	s.figure("highest clean step", 1_000, "req/s")
	intakeAloneFigures(s, &aloneResult{step: 1_000})
	if g := intakeAloneGoal(s, func(bool) *bool { return nil }); len(g) != 1 || g[0].Met != nil {
		t.Errorf("quick run goal %+v", g)
	}
}

func findGoal(goals []Goal, sub string) *Goal {
	for i := range goals {
		if strings.Contains(goals[i].Name, sub) {
			return &goals[i]
		}
	}
	return nil
}
