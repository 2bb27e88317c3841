// Package metric holds what every Stampede component does the same way with
// its Prometheus series. It is a leaf: it imports no Stampede package.
package metric

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg and returns it, or the collector already
// registered under the same descriptors (two components of one process
// sharing a series, or a component made twice). Any other error is a
// programming error (a name reused with different labels or help) and
// panics, like MustRegister. A nil reg registers nothing and returns c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
		}
		panic(err)
	}
	return c
}
