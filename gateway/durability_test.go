package gateway

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
)

// TestDurabilityReplicatedWithoutReplica: with durability replicated and no
// replica to acknowledge (the package's Redis has none), the reserve runs,
// the WAIT times out and the answer is 503 UNAVAILABLE with Retry-After;
// the reservation stays on the intake stream for the writer, and a replay
// waits the same way (503, never a 200 the replicas have not seen).
func TestDurabilityReplicatedWithoutReplica(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Durability, c.ReplicaAcks, c.ReplicaWait = DurabilityReplicated, 1, 30*time.Millisecond
	})
	pid := e.product(openSale(5))
	start := time.Now()
	r := e.buy(81, pid, 1, "dur-1")
	r.wantError(t, 503, CodeUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("answered in %s: it did not wait for a replica", d)
	}
	if n := e.intake(pid); n != 1 {
		t.Fatalf("%d intake entries; want the reservation left for the writer", n)
	}
	if a := e.available(pid, 0); a != 4 {
		t.Fatalf("available %d, want 4", a)
	}
	e.buy(81, pid, 1, "dur-1").wantError(t, 503, CodeUnavailable)
	if n := e.intake(pid); n != 1 {
		t.Fatalf("%d intake entries after the replay, want 1", n)
	}
	// One wait per batch, not per request: the wait key was written once
	// per batch on the shard's primary.
	if ttl, err := e.rdb.TTL(context.Background(), lua.ShardKeys(pid, 0).Wait()).Result(); err != nil || ttl <= 0 {
		t.Errorf("wait key TTL %v %v, want the barrier's SET", ttl, err)
	}
}

func TestParseDurability(t *testing.T) {
	for in, want := range map[string]Durability{"": DurabilityNone, "none": DurabilityNone, "aof": DurabilityAOF, "replicated": DurabilityReplicated} {
		if got, err := ParseDurability(in); err != nil || got != want {
			t.Errorf("ParseDurability(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseDurability("sync"); err == nil {
		t.Error("ParseDurability(sync): no error")
	}
}

// TestCheckDurabilityAOF: level aof refuses a Redis without appendonly yes.
func TestCheckDurabilityAOF(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cfg, err := e.rdb.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		t.Skipf("CONFIG GET not allowed: %v", err)
	}
	err = CheckDurability(ctx, e.rdb, DurabilityAOF, 1, testLogger(t))
	if cfg["appendonly"] == "no" && !errors.Is(err, ErrDurability) {
		t.Errorf("aof on appendonly no: %v, want ErrDurability", err)
	}
	if err := CheckDurability(ctx, e.rdb, DurabilityReplicated, 1, testLogger(t)); err != nil {
		t.Errorf("replicated without replicas: %v, want a warning only", err)
	}
	if err := CheckDurability(ctx, e.rdb, DurabilityNone, 1, testLogger(t)); err != nil {
		t.Errorf("none: %v", err)
	}
}
