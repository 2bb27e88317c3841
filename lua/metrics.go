package lua

import "github.com/prometheus/client_golang/prometheus"

// CallDurationBuckets are the bucket bounds, in seconds, of
// stampede_lua_call_duration_seconds: 100µs to 1s.
var CallDurationBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

// NewCallHistogram returns the unregistered stampede_lua_call_duration_seconds
// histogram vector {script}: the latency of one script call (EVALSHA round
// trip). The gateway (reserve) and the pipeline (release) both register it;
// defining it here once keeps the two registrations identical, which a
// Prometheus registry requires to let the second reuse the first.
func NewCallHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "stampede_lua_call_duration_seconds",
		Help:    "Latency of one Redis Lua script call (EVALSHA round trip), by script.",
		Buckets: CallDurationBuckets,
	}, []string{"script"})
}
