package loadgen

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds: values are microseconds from 1 µs to 5 minutes, kept to 3
// significant digits (±0.1 %).
const (
	histMin     = 1
	histMax     = int64(5 * time.Minute / time.Microsecond)
	histSigFigs = 3
)

// NewHistogram returns an empty latency histogram in microseconds with the
// bounds every histogram of this package uses, so they can be merged.
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMin, histMax, histSigFigs)
}

// Record adds d to h, clamped to the histogram's range.
func Record(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	if us < histMin {
		us = histMin
	}
	if us > histMax {
		us = histMax
	}
	_ = h.RecordValue(us) // cannot fail: clamped to the range
}

// Summary is the shape of one latency distribution, in milliseconds.
type Summary struct {
	Count int64   `json:"count"`
	Min   float64 `json:"min_ms"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// Summarize reads the summary of a histogram of microseconds. An empty or
// nil histogram gives the zero Summary.
func Summarize(h *hdrhistogram.Histogram) Summary {
	if h == nil || h.TotalCount() == 0 {
		return Summary{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	q := h.ValueAtPercentiles([]float64{50, 90, 95, 99, 99.9})
	return Summary{
		Count: h.TotalCount(),
		Min:   ms(h.Min()),
		Mean:  h.Mean() / 1000,
		P50:   ms(q[50]),
		P90:   ms(q[90]),
		P95:   ms(q[95]),
		P99:   ms(q[99]),
		P999:  ms(q[99.9]),
		Max:   ms(h.Max()),
	}
}
