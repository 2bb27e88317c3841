package httpapi

import (
	"testing"
	"time"
)

func TestRateLimiterPerUser(t *testing.T) {
	l := NewRateLimiter(0, 0, 10, 3)
	now := time.Unix(1_000, 0)
	for i := range 3 {
		if ok, _ := l.Allow(1, now); !ok {
			t.Fatalf("request %d refused within the burst", i)
		}
	}
	ok, wait := l.Allow(1, now)
	if ok || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("4th request: ok=%v wait=%v; want refused, wait ≤ 100ms", ok, wait)
	}
	if ok, _ := l.Allow(2, now); !ok {
		t.Fatal("another user was refused")
	}
	if ok, _ := l.Allow(1, now.Add(100*time.Millisecond)); !ok {
		t.Fatal("a token was not refilled after 1/rate")
	}
}

func TestRateLimiterGlobal(t *testing.T) {
	l := NewRateLimiter(5, 5, 0, 0)
	now := time.Unix(1_000, 0)
	for u := range int64(5) {
		if ok, _ := l.Allow(u, now); !ok {
			t.Fatalf("user %d refused within the global burst", u)
		}
	}
	if ok, wait := l.Allow(99, now); ok || wait <= 0 {
		t.Fatalf("global bucket empty: ok=%v wait=%v", ok, wait)
	}
	if NewRateLimiter(0, 0, 0, 0) != nil {
		t.Fatal("limits off: want a nil limiter")
	}
}

// TestRateLimiterEvictsIdleUsers: memory stays bounded however many users
// come by, and a bucket is forgotten only once it is full again.
func TestRateLimiterEvictsIdleUsers(t *testing.T) {
	l := NewRateLimiter(0, 0, 10, 20) // a bucket refills in 2s
	now := time.Unix(1_000, 0)
	for u := range int64(10_000) {
		l.Allow(u, now)
	}
	if n := l.size(); n != 10_000 {
		t.Fatalf("%d buckets; want 10000", n)
	}
	later := now.Add(3 * time.Second)
	for u := range int64(10_000) {
		l.Allow(1_000_000+u, later)
	}
	if n := l.size(); n > 10_000+userShards {
		t.Fatalf("%d buckets after the idle users' sweep; want about 10000", n)
	}
	// The hard cap holds even without idle buckets.
	for u := range int64(userShards*perShardCap + 5_000) {
		l.Allow(2_000_000+u, later)
	}
	if n := l.size(); n > userShards*perShardCap {
		t.Fatalf("%d buckets; cap %d", n, userShards*perShardCap)
	}
}
