package pipeline

import (
	"math"
	"time"
)

// levelControl is the auto pacer's controller of one room: window flow
// control of the orders on their way through the pipeline, the scheme TCP
// uses for the packets in flight (V. Jacobson, "Congestion Avoidance and
// Control", SIGCOMM 1988: "conservation of packets", a new packet enters
// only as an old one leaves; the window sized as BBR sizes it, N. Cardwell
// et al., "BBR: Congestion-Based Congestion Control", ACM Queue 14(5),
// 2016: the measured delivery rate × a target delay), the target delay
// being the operator's TargetBacklog.
//
//	pending  P = backlog B (intake entries not yet stored + PROCESSING orders)
//	             + what the live admissions L rose above their mean L̄ of
//	             the last drainSpan (the new ones: orders a moment later).
//	             L̄ itself is the buyers between admission and order at the
//	             present rate, or admitted buyers who never order: in flight
//	             by a delay, not queued (BBR's bandwidth-delay product).
//	             Counting all of L starved the pipeline once buyers took
//	             longer than TargetBacklog to order (a simulation with half
//	             the buyers ordering 4 s after admission drained 2 orders/s).
//	drain    d = orders that left PROCESSING per second over the last
//	             drainSpan (3 s): (ΔA − ΔB) / span, A the intake's
//	             entries-added counter; a plain moving window, long enough
//	             that one batch of the writers or the consumer (hundreds of
//	             orders at once) or a stall of a loaded machine moves it
//	             by a fraction of itself
//	level    T = TargetBacklog × max(d, MinRate) orders (Little's law: T
//	             orders draining at d take TargetBacklog to pass)
//
// Each step admits the gap T − P̂, at most (AdmitArgs.Max), at the rate
// (T − P̂) / Interval bounded to [MinRate, Ceiling]; P̂ is P as last
// measured (every MeasureEvery) plus the admissions of this pacer's steps
// since, less the drain d over the time since the measurement, for at most
// MeasureEvery. Without that credit an order's place was given again only
// once a measurement saw it leave (conservation of packets): the pacer
// filled the gap right after each measurement and waited for the next, so
// every measurement found the backlog a measurement interval of drain
// under T (the bench: 1.6–1.7 s for a 2 s target, with measurements 0.25 to
// 0.33 s apart on a loaded machine). The credit stops at MeasureEvery after
// the measurement, so a late measurement or a stalled pipeline costs at most
// d × MeasureEvery of admissions over the level, once; P then exceeds T
// only by that and when T itself falls (the drain slowed), by what the
// drain of the last span overstated. The
// previous controller set a rate, r = d + (T − P) / 1 s, from
// measurements 0.25 s apart, smoothed (EWMA) and applied for the next
// quarter second: it kept admitting at the drain it had seen while a
// stalled pipeline drained nothing, and its one-second drain, moved by
// half by one batch, moved its target as much.
//
// While B stays below half of TargetBacklog × d with buyers still waiting,
// the pipeline finished everything it was given, so the drain seen is only
// what was admitted (BBR's "application-limited" samples): T then does not
// fall with d, and it grows from TargetBacklog × StartRate: doubling per
// second while P is below half of T, by a quarter per second while the
// admissions in flight fill the window (probeGrowth, fullGrowth). T never
// exceeds TargetBacklog × Ceiling. Buyers who order seconds after their
// admission still make the backlog overshoot when the ceiling is above what
// the pipeline can drain: the growth of the last seconds arrives at once
// (the simulation, half the buyers ordering 4 s after admission, ceiling
// 10,000/s: backlog up to 8.5 s of drain, 13.8 s with doubling).
//
// With several pacers each adds only its own admissions to its P̂ until its
// next measurement: k pacers may fill the same gap up to k times within
// one MeasureEvery; the room's rate (every pacer's steps share one budget
// in Redis) and Ceiling still bound them. Not safe for concurrent use (the
// Pacer's mutex guards it).
type levelControl struct {
	target  float64 // T, orders
	drain   float64 // d, orders per second (0 before two measurements)
	pending float64 // P̂ at the last measurement plus the admissions since, orders
	// measures are the last measurements, oldest first (at zero: none).
	measures [drainSamples]levelSample
	waiting  bool // the last step left buyers waiting
}

// levelSample is one measurement of the backlog and the intake counter.
type levelSample struct {
	at                      time.Time
	backlog, live, accepted int64
}

// drainSpan is how far back the drain is measured; drainSamples holds
// enough measurements to span it at MeasureEvery down to 100 ms.
const (
	drainSpan    = 3 * time.Second
	drainSamples = 32
)

// Growth of the level per second while the pipeline is application-limited:
// probeGrowth while the admissions in flight leave half the window empty,
// fullGrowth while they fill it (buyers slow to order, or admitted buyers
// who never order, keep the window full while the pipeline idles; the level
// still grows, slowly enough that orders arriving seconds after their
// admissions overshoot it by a bounded factor: 1.25^4 ≈ 2.4 for buyers who
// order 4 s after their admission).
const (
	probeGrowth = 2.0
	fullGrowth  = 1.25
)

func newLevelControl(cfg PacerConfig) levelControl {
	return levelControl{target: cfg.TargetBacklog.Seconds() * min(cfg.StartRate, cfg.Ceiling), waiting: true}
}

// ask is the rate (admissions per second) and the most admissions of the
// next step at now.
func (lc *levelControl) ask(now time.Time, cfg PacerConfig) (rate float64, most int) {
	gap := lc.target - lc.pending + lc.drained(now, cfg)
	if gap < 1 {
		return cfg.MinRate, 1 // at or over the level: the floor only
	}
	rate = math.Min(math.Max(gap/cfg.Interval.Seconds(), cfg.MinRate), cfg.Ceiling)
	return rate, int(min(math.Ceil(gap), maxStep))
}

// drained is the orders expected to have left the backlog since the last
// measurement: the drain d over the time since, for at most MeasureEvery.
func (lc *levelControl) drained(now time.Time, cfg PacerConfig) float64 {
	last := lc.measures[len(lc.measures)-1].at
	if last.IsZero() {
		return 0
	}
	return lc.drain * min(max(now.Sub(last), 0), cfg.MeasureEvery).Seconds()
}

// admitted adds a step's n admissions to P̂; waiting tells whether buyers
// were left waiting after it.
func (lc *levelControl) admitted(n int, waiting bool) {
	lc.pending += float64(n)
	lc.waiting = waiting
}

// measured takes a measurement at now: backlog B, live admissions L and the
// intake's entries-added counter A.
func (lc *levelControl) measured(now time.Time, backlog, live, accepted int64, cfg PacerConfig) {
	prev := lc.measures[len(lc.measures)-1]
	copy(lc.measures[:], lc.measures[1:])
	lc.measures[len(lc.measures)-1] = levelSample{at: now, backlog: backlog, live: live, accepted: accepted}
	var old levelSample
	var liveSum, liveN float64
	for i, m := range lc.measures {
		if m.at.IsZero() {
			continue
		}
		if now.Sub(m.at) <= drainSpan {
			liveSum += float64(m.live)
			liveN++ // the measurement just stored counts: never 0
		}
		if i < len(lc.measures)-1 && (old.at.IsZero() || now.Sub(m.at) >= drainSpan) {
			old = m
		}
	}
	// The live admissions count as orders a moment later only by what they
	// rose above their level of the last drainSpan: that level is the
	// buyers between admission and order at the present rate (BBR's
	// bandwidth-delay product: in flight by the delay itself, not queued),
	// or admitted buyers who will never order, and counting it against
	// the backlog's target starves the pipeline as soon as buyers take
	// longer than TargetBacklog to order.
	pending := float64(backlog) + float64(live) - liveSum/liveN
	span := now.Sub(old.at).Seconds()
	if old.at.IsZero() || span <= 0 {
		lc.pending = pending // the first measurement: no drain yet, the level stays
		return
	}
	lc.drain = max(float64((accepted-old.accepted)-(backlog-old.backlog))/span, 0)
	tau := cfg.TargetBacklog.Seconds()
	next := tau * max(lc.drain, cfg.MinRate)
	if float64(backlog) < next/2 && lc.waiting {
		// Application-limited: the pipeline finished what reached it, so
		// its drain says nothing of what it could do and does not lower
		// the level (BBR ignores such samples the same way); the level
		// grows, fast while the admissions in flight leave the window
		// half empty, slowly while they fill it.
		next = max(next, lc.target)
		growth := probeGrowth
		if pending >= lc.target/2 {
			growth = fullGrowth
		}
		next = max(next, lc.target*math.Pow(growth, min(now.Sub(prev.at).Seconds(), 1)))
	}
	lc.target = min(next, tau*cfg.Ceiling)
	lc.pending = pending
}
