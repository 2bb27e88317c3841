package bench

import (
	"context"
	"fmt"

	"github.com/stampede-sh/stampede/pipeline"
)

// Intake alone (issue 25): each sustained rate runs twice in one run, first
// with the pipeline roles (writer, relay, consumer, sweeper) stopped — the
// gateway and Redis alone — then with the full system, and the report gives
// the ratio of the two highest clean steps.
//
// With the pipeline stopped every accepted order stays in the intake stream
// by design, so the "< 1 s of intake still PROCESSING" half of the clean
// rule cannot apply: an intake-alone step is judged by its answers alone
// (every answer a 202, nothing abandoned, no error, p99 ≤ SustainedP99).

// intakeAloneLabel prefixes the intake-alone phases and figures.
const intakeAloneLabel = "intake alone: "

// Figure and goal names of the comparison.
const (
	figAloneStep  = intakeAloneLabel + "highest clean step"
	figAloneRate  = intakeAloneLabel + "accepted intake"
	figAloneRatio = "full system ÷ intake alone, highest clean step"
	aloneGoalMin  = 0.6
)

// aloneResult is what the intake-alone steps leave for the full-system
// figures: the highest clean step's rate (req/s) and its 202 rate
// (orders/s), both 0 when no step was clean.
type aloneResult struct {
	step, accepted float64
}

// intakeAloneStepper is the intake-alone series of a sustained run on a
// product of its own, or nil when the comparison is off or impossible (no
// in-process pipeline, a baseline target, durability levels).
func (r *run) intakeAloneStepper(ctx context.Context, t *target) (*stepper, error) {
	if !r.p.SustainedIntakeAlone || r.env.Pipeline == nil || t.index > 0 || r.levels {
		return nil, nil
	}
	pid, err := r.createProduct(ctx, t, Sustained+" intake alone", r.p.SustainedStock, 0)
	if err != nil {
		return nil, fmt.Errorf("intake alone: %w", err)
	}
	return &stepper{pid: pid, prefix: r.requestPrefix(t, "sa"), label: intakeAloneLabel, acc: &outcomes{}}, nil
}

// intakeAloneStep runs st's step at rate with the pipeline stopped, then
// restarts the configured pipeline and waits until it has drained what the
// step accepted, so that the full-system step after it starts from an idle
// pipeline. err is a failure to restart the pipeline.
func (r *run) intakeAloneStep(ctx context.Context, t *target, s *ScenarioResult, st *stepper, rate float64) error {
	r.env.Pipeline.Stop()
	if len(s.Phases) == 0 {
		r.logf("   intake alone (pipeline stopped): gateway + Redis, interleaved with the full system rate by rate")
	}
	r.sustainedStep(ctx, t, s, st, rate)
	if err := r.env.Pipeline.Start(context.WithoutCancel(ctx), "", 0); err != nil {
		return fmt.Errorf("restart the pipeline after an intake-alone step: %w", err)
	}
	if _, err := r.reconcile(ctx, st.pid, true); err != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("intake alone at %s/s: the pipeline did not drain the step's orders: %v", fmtNum(rate), err))
	}
	return nil
}

// intakeAloneAudit audits the intake-alone product (every 202 one order)
// and returns the series' result for the figures: the highest clean step's
// rate (req/s) and 202 rate (orders/s), both 0 when no step was clean.
func (r *run) intakeAloneAudit(ctx context.Context, s *ScenarioResult, st *stepper) *aloneResult {
	out := &aloneResult{}
	if st.best != nil {
		out.step, out.accepted = st.best.Rate, classRate(st.best.Result, classAccepted)
	}
	accepted, unknown := st.acc.counts()
	a := r.audit(ctx, st.pid, func(_ pipeline.Report, pa pipeline.ProductAudit) []pipeline.Check {
		return []pipeline.Check{ordersCheck(orderCount(pa), accepted, unknown)}
	})
	s.Notes = append(s.Notes, fmt.Sprintf("product %d: intake alone (pipeline stopped; judged by its answers and p99 only, its orders drained after each step)", st.pid))
	if !a.Pass {
		s.fail(fmt.Errorf("intake-alone product %d: audit failed: %v", st.pid, a.Failed()))
	}
	return out
}

// intakeAloneFigures adds the intake-alone figures and the ratio of the
// full system's highest clean step (s's "highest clean step", 0 if none) to
// the intake-alone one. No ratio without a clean intake-alone step; when
// the intake alone was clean up to the last rate the ratio is an upper
// bound, and s says so.
func intakeAloneFigures(s *ScenarioResult, a *aloneResult) {
	s.figure(figAloneStep, a.step, "req/s")
	s.figure(figAloneRate, a.accepted, "orders/s")
	if a.step <= 0 {
		s.Notes = append(s.Notes, "intake alone: no step was clean, so no full ÷ intake-alone ratio")
		return
	}
	full, _ := s.Figure("highest clean step")
	s.figure(figAloneRatio, full/a.step, "×")
	if _, over := s.Figure(intakeAloneLabel + "first step over the limit"); !over {
		s.Notes = append(s.Notes, "intake alone was clean at every step: its ceiling is higher, the ratio an upper bound")
	}
}

// intakeAloneGoal is the issue-25 goal: the full system's highest clean
// sustained step ≥ 0.6× the intake-alone one of the same run. None when
// the intake-alone steps did not run, unjudged (Met nil) when none of them
// was clean; met is goals' verdict (nil in a quick run).
func intakeAloneGoal(s *ScenarioResult, met func(bool) *bool) []Goal {
	alone, ran := s.Figure(figAloneStep)
	if !ran {
		return nil
	}
	g := Goal{Name: "sustained: full system vs intake alone (pipeline stopped) in the same run, highest clean step",
		Target: fmt.Sprintf("≥ %.1f×", aloneGoalMin), Value: "no intake-alone step was clean: no ratio"}
	if v, ok := s.Figure(figAloneRatio); ok {
		full, _ := s.Figure("highest clean step")
		g.Value = fmt.Sprintf("%.2f× (%s ÷ %s req/s)", v, fmtNum(full), fmtNum(alone))
		g.Met = met(v >= aloneGoalMin && s.Pass)
	}
	return []Goal{g}
}
