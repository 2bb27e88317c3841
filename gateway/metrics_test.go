package gateway

import (
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/lua"
)

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func seriesCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

func TestReserveOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	NewMetrics(reg) // a second gateway of the process shares the series instead of panicking
	for _, c := range []struct {
		err  error
		want reserveResult
	}{
		{nil, resAccepted},
		{fmt.Errorf("wrapped: %w", lua.ErrDuplicate), resDuplicate},
		{lua.ErrSoldOut, resSoldOut},
		{lua.ErrInsufficient, resInsufficient},
		{lua.ErrLimitExceeded, resLimited},
		{lua.ErrNotActive, resNotActive},
		{lua.ErrKeyReused, resKeyReused},
		{lua.ErrNotFound, resNotFound},
		{lua.ErrBadQuantity, resInvalid},
		{gobreaker.ErrOpenState, resUnavailable},
		{errors.New("dial tcp: connection refused"), resUnavailable},
	} {
		before := counterValue(t, m.reserve[c.want])
		m.ReserveOutcome(c.err)
		if got := counterValue(t, m.reserve[c.want]); got != before+1 {
			t.Errorf("%v: %s went %v → %v", c.err, reserveResultNames[c.want], before, got)
		}
	}
	m.ReserveRateLimited()
	if got := counterValue(t, m.reserve[resRateLimited]); got != 1 {
		t.Errorf("rate_limited = %v", got)
	}
	// Every result is exported from the start, at 0 if never seen.
	if n := seriesCount(t, reg, "stampede_reserve_total"); n != int(numReserveResults) {
		t.Errorf("%d reserve series, want %d", n, numReserveResults)
	}
}

// TestRouteMetricsAllocationFree: recording a request's duration costs no
// allocation once its status was seen.
func TestRouteMetricsAllocationFree(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	h := m.route("POST", "/api/orders").instrument(func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(202) })
	var ctx fasthttp.RequestCtx
	h(&ctx)
	if allocs := testing.AllocsPerRun(1000, func() { h(&ctx) }); allocs != 0 {
		t.Errorf("%v allocations per request", allocs)
	}
	if got := seriesCount(t, reg, "stampede_http_request_duration_seconds"); got != 1 {
		t.Errorf("%d duration series, want 1", got)
	}
}
