package gateway

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestOrderRateLimited(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.RateUser, c.RateUserBurst = 0.5, 2 })
	pid := e.product(openSale(100))
	e.accepted(41, pid, 1, "rl-1")
	e.accepted(41, pid, 1, "rl-2")
	r := e.buy(41, pid, 1, "rl-3")
	r.wantError(t, 429, CodeRateLimited)
	if ra := r.header.Get("Retry-After"); ra != "2" {
		t.Errorf("Retry-After = %q; want 2 (one token at 0.5/s)", ra)
	}
	if n := e.intake(pid); n != 2 {
		t.Errorf("intake has %d entries; want 2 (the 429 reached Redis?)", n)
	}
	if got := testutil.ToFloat64(e.srv.metrics.reserve[resRateLimited]); got != 1 {
		t.Errorf("rate_limited counter = %v; want 1", got)
	}
	e.accepted(42, pid, 1, "rl-1") // another user is not limited
}
