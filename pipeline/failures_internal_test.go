package pipeline

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// FailureLog logs once per change of state (the first failure of a run, the
// recovery), counts every failure in stampede_loop_failures_total{loop}, and
// returns pauses that double from min to max with ±20 % jitter, back at min
// after a recovery.
func TestFailureLog(t *testing.T) {
	rec := &recordLog{}
	m := NewMetrics(nil)
	const lo, hi = 100 * time.Millisecond, time.Second
	f := NewFailureLog("unit", "unit: round", slog.New(rec), m, lo, hi)
	if f.Failing() {
		t.Fatal("failing before any round")
	}
	f.OK() // a success without failures logs nothing
	down := errors.New("connection refused")
	want := lo
	for i := range 10 {
		d := f.Fail(down)
		if d < want*8/10 || d > want*12/10 {
			t.Errorf("failure %d: pause %v, want %v ±20%%", i+1, d, want)
		}
		want = min(want*2, hi)
	}
	if !f.Failing() {
		t.Fatal("not failing after 10 failures")
	}
	if n := testutil.ToFloat64(m.loopFailures.WithLabelValues("unit")); n != 10 {
		t.Errorf("stampede_loop_failures_total{loop=unit} = %v after 10 failures", n)
	}
	if w, r := rec.count("unit: round failed"), rec.count("unit: round works again"); w != 1 || r != 0 {
		t.Fatalf("after 10 failures: %d failure lines, %d recovery lines, want 1 and 0: %q", w, r, rec.msgs)
	}
	f.OK()
	f.OK()
	if f.Failing() {
		t.Fatal("failing after a round that worked")
	}
	if w, r := rec.count("unit: round failed"), rec.count("unit: round works again"); w != 1 || r != 1 {
		t.Fatalf("after the recovery: %d failure lines, %d recovery lines, want 1 and 1: %q", w, r, rec.msgs)
	}
	// A new run of failures: logged again, the pause starts at min again.
	if d := f.Fail(down); d < lo*8/10 || d > lo*12/10 {
		t.Errorf("first failure after a recovery: pause %v, want %v ±20%%", d, lo)
	}
	f.Fail(down)
	if w := rec.count("unit: round failed"); w != 2 {
		t.Fatalf("second run of failures: %d failure lines in all, want 2: %q", w, rec.msgs)
	}
	if n := testutil.ToFloat64(m.loopFailures.WithLabelValues("unit")); n != 12 {
		t.Errorf("stampede_loop_failures_total{loop=unit} = %v after 12 failures", n)
	}
	if len(rec.msgs) != 3 {
		t.Errorf("%d log lines for 12 failures and one recovery, want 3: %q", len(rec.msgs), rec.msgs)
	}
}
