package metric_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-sh/stampede/metric"
)

// TestRegister: a second registration of the same series returns the first
// collector (both components then count into one series); one that
// conflicts panics; a nil registry registers nothing.
func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "stampede_test_total", Help: "A test counter."}
	a := metric.Register(reg, prometheus.NewCounter(opts))
	b := metric.Register(reg, prometheus.NewCounter(opts))
	if a != b {
		t.Fatal("the second registration did not return the first collector")
	}
	b.Inc()
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Fatalf("gathered %v, %v; want one series at 1", mfs, err)
	}
	if c := prometheus.NewCounter(opts); metric.Register(nil, c) != c {
		t.Fatal("a nil registry did not return the collector")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a conflicting registration did not panic")
		}
	}()
	metric.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "stampede_test_total", Help: "Other help."}))
}
