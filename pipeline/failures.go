package pipeline

import (
	"log/slog"
	"time"
)

// FailureLog is the retry state of one background loop that talks to a
// dependency (the pacer's product listing, the push feeds, the sweeper's
// passes): an exponential backoff between failed rounds, and bounded
// logging — one warn line when the loop starts failing (with the error),
// one info line when it works again (with how many rounds failed and for
// how long); every failed round in between only counts in
// stampede_loop_failures_total{loop}. Not safe for concurrent use: one per
// loop.
type FailureLog struct {
	loop    string
	what    string
	log     *slog.Logger
	m       *Metrics
	bo      *backoff
	failing int
	since   time.Time
}

// NewFailureLog returns the FailureLog of loop (the metric's label; what
// describes the round in the log line, e.g. "pacer: list products"),
// backing off from min to max.
func NewFailureLog(loop, what string, log *slog.Logger, m *Metrics, min, max time.Duration) *FailureLog {
	if log == nil {
		log = slog.Default()
	}
	return &FailureLog{loop: loop, what: what, log: log, m: orNew(m), bo: newBackoff(min, max)}
}

// Fail records a failed round and returns the pause before the next one.
// Only the first failure of a run is logged.
func (f *FailureLog) Fail(err error) time.Duration {
	f.m.loopFailures.WithLabelValues(f.loop).Inc()
	if f.failing == 0 {
		f.since = time.Now()
		f.log.Warn(f.what+" failed; retrying with backoff, logging again when it recovers", "err", err)
	}
	f.failing++
	return f.bo.next()
}

// OK records a round that worked; after failures it logs the recovery.
func (f *FailureLog) OK() {
	if f.failing > 0 {
		f.log.Info(f.what+" works again", "failedRounds", f.failing, "failingFor", time.Since(f.since).Round(time.Millisecond).String())
		f.failing = 0
	}
	f.bo.reset()
}

// Failing reports whether the last round failed.
func (f *FailureLog) Failing() bool { return f.failing > 0 }
