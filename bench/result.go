package bench

import (
	"fmt"
	"time"

	"github.com/stampede-sh/stampede/bench/loadgen"
	"github.com/stampede-sh/stampede/pipeline"
)

// Report is everything one benchmark run measured.
type Report struct {
	RunID    string    `json:"runId"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Quick    bool      `json:"quick"`
	Machine  Machine   `json:"machine"`
	Params   Params    `json:"params"`
	Targets  []Target  `json:"targets"`
	// Levels: the targets are Redis durability levels (Options.Levels).
	Levels    bool     `json:"levels,omitempty"`
	Scenarios []string `json:"scenarios"`
	// Command is the command line that ran the benchmark ("" if unknown).
	Command string `json:"command,omitempty"`
	// Results holds one entry per scenario and target, in run order.
	Results []*ScenarioResult `json:"results"`
	// Ceiling is redis-benchmark's figure for the reserve script alone.
	Ceiling *Ceiling `json:"ceiling,omitempty"`
	// Goals are the targets of issue 5 and whether this run met them.
	Goals []Goal `json:"goals"`
	// Pass is true when every scenario ran and every audit passed. Goals
	// missed do not fail a run: they are benchmarks, not tests.
	Pass bool `json:"pass"`
}

// ScenarioResult is one scenario against one target.
type ScenarioResult struct {
	Scenario  string    `json:"scenario"`
	Target    string    `json:"target"`
	ProductID int64     `json:"productId,omitempty"`
	Started   time.Time `json:"started"`
	ElapsedS  float64   `json:"elapsedS"`
	// Headline is the scenario's one number (accepted intake, rejections/s…)
	// and HeadlineLatency the latency that goes with it.
	Headline        Figure          `json:"headline"`
	HeadlineLatency loadgen.Summary `json:"headlineLatency"`
	// Phases are the load runs, in order (the sustained steps, the sell-out
	// and the storm, …).
	Phases []Phase `json:"phases"`
	// Figures are further named numbers (time to sell out, drain rate, …).
	Figures []Figure `json:"figures,omitempty"`
	// Latencies are further named distributions (202 → WAITING_PAY, …).
	Latencies map[string]loadgen.Summary `json:"latencies,omitempty"`
	// Tables are further tables (the drain's cost per order, …).
	Tables []Table  `json:"tables,omitempty"`
	Audit  *Audit   `json:"audit,omitempty"`
	Memory *Memory  `json:"memory,omitempty"`
	Notes  []string `json:"notes,omitempty"`
	Error  string   `json:"error,omitempty"` // the scenario could not run to its end
	Pass   bool     `json:"pass"`            // ran, and the audit passed
}

// Table is a titled table of preformatted cells.
type Table struct {
	Title  string     `json:"title"`
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

// Figure is a named number.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// Phase is one load run of a scenario.
type Phase struct {
	Name   string          `json:"name"`
	Rate   float64         `json:"rate"`
	OK     *bool           `json:"ok,omitempty"` // sustained steps: within the p99 limit and clean
	Result *loadgen.Result `json:"result"`
}

// Audit is the docs/spec.md §5 reconciliation of a scenario's product after the
// pipeline went idle, plus the scenario's own checks ("bench: ...").
type Audit struct {
	Pass      bool             `json:"pass"`
	Idle      bool             `json:"idle"`       // the pipeline went idle within IdleWait
	IdleAfter float64          `json:"idleAfterS"` // seconds waited for it
	Orders    map[string]int64 `json:"orders"`     // status → orders of the product
	Checks    []pipeline.Check `json:"checks"`
	Error     string           `json:"error,omitempty"`
}

// Failed lists the checks that did not pass.
func (a *Audit) Failed() []string {
	var out []string
	for _, c := range a.Checks {
		if !c.OK {
			out = append(out, c.Name+" ("+c.Detail+")")
		}
	}
	if a.Error != "" {
		out = append(out, a.Error)
	}
	return out
}

// Goal is one target of issue 5.
type Goal struct {
	Name   string `json:"name"`
	Target string `json:"target"`
	Value  string `json:"value"`
	// Met is nil when the run could not tell (scenario not run, quick run).
	Met *bool `json:"met,omitempty"`
}

func ptr[T any](v T) *T { return &v }

func (s *ScenarioResult) fail(err error) *ScenarioResult {
	if s.Error == "" {
		s.Error = err.Error()
	}
	return s
}

func (s *ScenarioResult) figure(name string, v float64, unit string) {
	s.Figures = append(s.Figures, Figure{Name: name, Value: v, Unit: unit})
}

// Figure returns the named figure's value and whether it exists.
func (s *ScenarioResult) Figure(name string) (float64, bool) {
	for _, f := range s.Figures {
		if f.Name == name {
			return f.Value, true
		}
	}
	return 0, false
}

func (s *ScenarioResult) finish() {
	s.Pass = s.Error == "" && s.Audit != nil && s.Audit.Pass
}

func (s *ScenarioResult) line() string {
	verdict := "PASS"
	if !s.Pass {
		verdict = "FAIL"
	}
	out := fmt.Sprintf("%s: %s %s", verdict, fmtNum(s.Headline.Value), s.Headline.Unit)
	if s.HeadlineLatency.Count > 0 {
		l := s.HeadlineLatency
		out += fmt.Sprintf(", p50 %s p95 %s p99 %s max %s", fmtMs(l.P50), fmtMs(l.P95), fmtMs(l.P99), fmtMs(l.Max))
	}
	if s.Error != "" {
		out += "; error: " + s.Error
	}
	if s.Audit != nil {
		for _, f := range s.Audit.Failed() {
			out += "; audit: " + f
		}
	}
	return out
}

// result returns the scenario's result against label, or nil.
func (r *Report) result(scenario, label string) *ScenarioResult {
	for _, s := range r.Results {
		if s.Scenario == scenario && s.Target == label {
			return s
		}
	}
	return nil
}

func (r *Report) finish() *Report {
	r.Finished = time.Now().UTC()
	r.Pass = len(r.Results) > 0
	for _, s := range r.Results {
		r.Pass = r.Pass && s.Pass
	}
	r.Goals = r.goals()
	return r
}

// goals evaluates the targets of issue 5 against the first target (and the
// baseline for the ratio). A quick run never claims a throughput goal.
func (r *Report) goals() []Goal {
	if len(r.Targets) == 0 {
		return nil
	}
	main := r.Targets[0].Label
	met := func(ok bool) *bool {
		if r.Quick {
			return nil
		}
		return ptr(ok)
	}
	var out []Goal
	if s := r.result(Sustained, main); s != nil {
		v := s.Headline.Value
		out = append(out, Goal{Name: "accepted intake", Target: "≥ 20,000 orders/s with p99 ≤ 50 ms",
			Value: fmtNum(v) + " orders/s", Met: met(v >= 20_000 && s.Pass)})
		out = append(out, intakeAloneGoal(s, met)...)
	}
	if s := r.result(SoldOut, main); s != nil {
		v := s.Headline.Value
		out = append(out, Goal{Name: "sold-out rejections", Target: "≥ 50,000/s",
			Value: fmtNum(v) + "/s", Met: met(v >= 50_000 && s.Pass)})
	}
	if len(r.Targets) > 1 && !r.Levels {
		s, b := r.result(Sustained, main), r.result(Sustained, r.Targets[1].Label)
		if s != nil && b != nil {
			g := Goal{Name: "stream vs sync intake", Target: "≥ 8×"}
			if b.Headline.Value > 0 {
				ratio := s.Headline.Value / b.Headline.Value
				g.Value = fmt.Sprintf("%.1f×", ratio)
				g.Met = met(ratio >= 8)
			} else {
				g.Value = "sync accepted nothing within the p99 limit"
			}
			out = append(out, g)
		}
	}
	if s := r.result(E2E, main); s != nil {
		v, _ := s.Figure("drain rate")
		out = append(out, Goal{Name: "e2e drain (intake running)", Target: "≥ 5,000 orders/s to WAITING_PAY",
			Value: fmtNum(v) + " orders/s", Met: met(v >= 5_000 && s.Pass)})
	}
	if s := r.result(Drain, main); s != nil {
		out = append(out, drainGoals(s, met)...)
	}
	peak, known, inProcess := 0.0, false, false
	for _, s := range r.Results {
		if s.Target == main && s.Memory != nil && s.Memory.Error == "" {
			peak = max(peak, s.Memory.PeakMB())
			known = true
			inProcess = s.Memory.InProcess
		}
	}
	if known {
		g := Goal{Name: "gateway memory", Target: "≤ 300 MB RSS at peak", Value: fmt.Sprintf("%.0f MB", peak)}
		if inProcess {
			g.Value += " (whole bench process: every role and the load generator)"
		}
		g.Met = met(peak <= 300)
		out = append(out, g)
	}
	return out
}

// drainGoals are the drain scenario's goals, read from the figures of the
// shipped design (DesignWriter; DesignBatch in a run without it); met is
// goals' verdict (nil in a quick run).
func drainGoals(s *ScenarioResult, met func(bool) *bool) []Goal {
	var out []Goal
	d := DesignWriter
	if _, ok := s.Figure(d + ": drain rate"); !ok {
		d = DesignBatch
	}
	if v, ok := s.Figure(d + ": drain rate"); ok {
		out = append(out, Goal{Name: "drain (intake stopped), " + d + " design", Target: "≥ 5,000 orders/s to WAITING_PAY",
			Value: fmtNum(v) + " orders/s", Met: met(v >= 5_000 && s.Pass)})
	}
	if v, ok := s.Figure(d + ": drain rate / batch design's"); ok {
		out = append(out, Goal{Name: "drain, " + d + " design vs the batch design in the same run", Target: "≥ 2×",
			Value: fmt.Sprintf("%.2f×", v), Met: met(v >= 2 && s.Pass)})
	}
	if v, ok := s.Figure(d + ": row writes per drained order"); ok {
		out = append(out, Goal{Name: "row writes per order to WAITING_PAY, " + d + " design", Target: "≤ 4",
			Value: fmt.Sprintf("%.2f", v), Met: met(v <= 4)})
	}
	if v, ok := s.Figure(d + ": RabbitMQ messages per drained order"); ok {
		out = append(out, Goal{Name: "RabbitMQ messages per order to WAITING_PAY, " + d + " design", Target: "≤ 0.05",
			Value: fmt.Sprintf("%.4f", v), Met: met(v <= 0.05)})
	}
	if v, ok := s.Figure(d + ": MySQL commits per drained order"); ok {
		out = append(out, Goal{Name: "MySQL commits per drained order, " + d + " design", Target: "≤ 0.05",
			Value: fmt.Sprintf("%.4f", v), Met: met(v <= 0.05)})
	}
	if v, ok := s.Figure(d + ": close delay p95"); ok {
		out = append(out, Goal{Name: "close delay past the pay deadline, " + d + " design", Target: "p95 ≤ 2 s",
			Value: fmtMs(v), Met: met(v <= 2000 && s.Pass)})
	}
	return out
}
