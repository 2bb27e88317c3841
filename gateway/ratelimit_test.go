package gateway

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRateLimiterPerUser(t *testing.T) {
	l := newRateLimiter(0, 0, 10, 3)
	now := time.Unix(1_000, 0)
	for i := range 3 {
		if ok, _ := l.allow(1, now); !ok {
			t.Fatalf("request %d refused within the burst", i)
		}
	}
	ok, wait := l.allow(1, now)
	if ok || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("4th request: ok=%v wait=%v; want refused, wait ≤ 100ms", ok, wait)
	}
	if ok, _ := l.allow(2, now); !ok {
		t.Fatal("another user was refused")
	}
	if ok, _ := l.allow(1, now.Add(100*time.Millisecond)); !ok {
		t.Fatal("a token was not refilled after 1/rate")
	}
}

func TestRateLimiterGlobal(t *testing.T) {
	l := newRateLimiter(5, 5, 0, 0)
	now := time.Unix(1_000, 0)
	for u := range int64(5) {
		if ok, _ := l.allow(u, now); !ok {
			t.Fatalf("user %d refused within the global burst", u)
		}
	}
	if ok, wait := l.allow(99, now); ok || wait <= 0 {
		t.Fatalf("global bucket empty: ok=%v wait=%v", ok, wait)
	}
	if newRateLimiter(0, 0, 0, 0) != nil {
		t.Fatal("limits off: want a nil limiter")
	}
}

// TestRateLimiterEvictsIdleUsers: memory stays bounded however many users
// come by, and a bucket is forgotten only once it is full again.
func TestRateLimiterEvictsIdleUsers(t *testing.T) {
	l := newRateLimiter(0, 0, 10, 20) // a bucket refills in 2s
	now := time.Unix(1_000, 0)
	for u := range int64(10_000) {
		l.allow(u, now)
	}
	if n := l.size(); n != 10_000 {
		t.Fatalf("%d buckets; want 10000", n)
	}
	later := now.Add(3 * time.Second)
	for u := range int64(10_000) {
		l.allow(1_000_000+u, later)
	}
	if n := l.size(); n > 10_000+userShards {
		t.Fatalf("%d buckets after the idle users' sweep; want about 10000", n)
	}
	// The hard cap holds even without idle buckets.
	for u := range int64(userShards*perShardCap + 5_000) {
		l.allow(2_000_000+u, later)
	}
	if n := l.size(); n > userShards*perShardCap {
		t.Fatalf("%d buckets; cap %d", n, userShards*perShardCap)
	}
}

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
