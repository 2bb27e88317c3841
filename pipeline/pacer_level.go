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
//	             + live admissions L (orders a moment later)
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
// since. P̂ is not lowered by the expected drain between measurements: an
// order's place is given again only once the measurement saw it leave
// (conservation of packets), so P exceeds T only when T itself falls (the
// drain slowed), by what the drain of the last span overstated. The
// previous controller set a rate, r = d + (T − P) / 1 s, from
// measurements 0.25 s apart, smoothed (EWMA) and applied for the next
// quarter second: it kept admitting at the drain it had seen while a
// stalled pipeline drained nothing, and its one-second drain, moved by
// half by one batch, moved its target as much.
//
// While P stays below half of T with buyers still waiting, the pipeline
// finished everything it was given, so the drain seen is only what was
// admitted (BBR's "application-limited" samples): T is then probed
// upwards, doubling per second, from TargetBacklog × StartRate. T never
// exceeds TargetBacklog × Ceiling.
//
// With several pacers each adds only its own admissions to its P̂ until its
// next measurement: k pacers may fill the same gap up to k times within
// one MeasureEvery; the room's rate (every pacer's steps share one budget
// in Redis) and Ceiling still bound them. Not safe for concurrent use (the
// Pacer's mutex guards it).
type levelControl struct {
	target  float64 // T, orders
	drain   float64 // d, orders per second (0 before two measurements)
	pending float64 // P̂, orders
	// measures are the last measurements, oldest first (at zero: none).
	measures [drainSamples]levelSample
	waiting  bool // the last step left buyers waiting
}

// levelSample is one measurement of the backlog and the intake counter.
type levelSample struct {
	at                time.Time
	backlog, accepted int64
}

// drainSpan is how far back the drain is measured; drainSamples holds
// enough measurements to span it at MeasureEvery down to 100 ms.
const (
	drainSpan    = 3 * time.Second
	drainSamples = 32
)

func newLevelControl(cfg PacerConfig) levelControl {
	return levelControl{target: cfg.TargetBacklog.Seconds() * min(cfg.StartRate, cfg.Ceiling), waiting: true}
}

// ask is the rate (admissions per second) and the most admissions of the
// next step at now.
func (lc *levelControl) ask(now time.Time, cfg PacerConfig) (rate float64, most int) {
	gap := lc.target - lc.pending
	if gap < 1 {
		return cfg.MinRate, 1 // at or over the level: the floor only
	}
	rate = math.Min(math.Max(gap/cfg.Interval.Seconds(), cfg.MinRate), cfg.Ceiling)
	return rate, int(min(math.Ceil(gap), 2000))
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
	lc.measures[len(lc.measures)-1] = levelSample{at: now, backlog: backlog, accepted: accepted}
	var old levelSample
	for _, m := range lc.measures[:len(lc.measures)-1] {
		if m.at.IsZero() {
			continue
		}
		if old.at.IsZero() || now.Sub(m.at) >= drainSpan {
			old = m
		}
	}
	pending := float64(backlog + live)
	span := now.Sub(old.at).Seconds()
	if old.at.IsZero() || span <= 0 {
		lc.pending = pending // the first measurement: no drain yet, the level stays
		return
	}
	lc.drain = max(float64((accepted-old.accepted)-(backlog-old.backlog))/span, 0)
	tau := cfg.TargetBacklog.Seconds()
	next := tau * max(lc.drain, cfg.MinRate)
	if pending < lc.target/2 && lc.waiting {
		// Application-limited: probe, doubling per second.
		next = max(next, lc.target*math.Pow(2, min(now.Sub(prev.at).Seconds(), 1)))
	}
	lc.target = min(next, tau*cfg.Ceiling)
	lc.pending = pending
}
