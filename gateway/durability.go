package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-sh/stampede/gateway/rediscall"
)

// Durability is how far an accepted reservation must have travelled in
// Redis before the gateway answers 202 (Config.Durability,
// STAMPEDE_REDIS_DURABILITY). Between the 202 and the writer's commit the
// reservation exists only in Redis; the level says what a Redis crash or a
// failover may take with it:
//
//   - DurabilityNone: the reply of the reserve script is enough. A restart
//     without persistence, or a failover to a replica that had not yet
//     received the last writes, drops them: the buyer holds an orderNo that
//     never becomes an order (the reconciliation counts what it can see of
//     it). No cost.
//   - DurabilityAOF: the same at request time; the server must run with
//     appendonly yes (checked at start-up, CheckDurability). With
//     appendfsync everysec a crash of the redis-server process loses
//     nothing it answered (the AOF is written before the reply), an OS crash
//     or power loss up to about a second of writes, and a failover to a
//     replica loses what a replica had not received, exactly as with none.
//   - DurabilityReplicated: after the reserve script the gateway waits until
//     at least ReplicaAcks replicas acknowledged the writes (WAIT, at most
//     ReplicaWait); only then 202. Concurrent requests share one WAIT per
//     Redis master (durableWaiter below). A timeout, or fewer replicas,
//     answers 503 UNAVAILABLE: the reservation stays on the intake stream and
//     the writer stores it as usual (the same as any Redis error after the
//     script ran), so the buyer's retry with the same requestId answers 200
//     with its orderNo. A failover then loses nothing that was answered,
//     unless every acknowledging replica is lost with the primary.
type Durability string

// Durability levels.
const (
	DurabilityNone       Durability = "none"
	DurabilityAOF        Durability = "aof"
	DurabilityReplicated Durability = "replicated"
)

// ParseDurability checks s ("" is none).
func ParseDurability(s string) (Durability, error) {
	switch d := Durability(s); d {
	case "", DurabilityNone:
		return DurabilityNone, nil
	case DurabilityAOF, DurabilityReplicated:
		return d, nil
	}
	return "", fmt.Errorf("redis durability %q is not none, aof or replicated", s)
}

// ErrDurability is returned by CheckDurability when Redis cannot give the
// durability asked for.
var ErrDurability = errors.New("redis cannot give the configured durability")

// CheckDurability checks every Redis master (every master of a cluster)
// against level before the gateway serves: with DurabilityAOF a master with
// appendonly no is refused (ErrDurability); with DurabilityReplicated a
// master with fewer than acks connected replicas is logged as a warning
// (its orders answer 503 until they are back: a replica may be resyncing at
// start-up). Where CONFIG or INFO is not allowed it logs that it could not
// check.
func CheckDurability(ctx context.Context, rdb redis.UniversalClient, level Durability, acks int, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	if level == "" || level == DurabilityNone {
		return nil
	}
	check := func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		switch level {
		case DurabilityAOF:
			cfg, err := c.ConfigGet(ctx, "appendonly").Result()
			if err != nil {
				if rediscall.IsConnError(err) || ctx.Err() != nil {
					return fmt.Errorf("redis at %s: config get appendonly: %w", addr, err)
				}
				log.Warn("redis: CONFIG GET is not allowed; cannot verify appendonly yes for durability aof", "addr", addr)
				return nil
			}
			if !strings.EqualFold(cfg["appendonly"], "yes") {
				return fmt.Errorf("%w: STAMPEDE_REDIS_DURABILITY=aof but redis at %s has appendonly %q; run CONFIG SET appendonly yes (and persist it in redis.conf) or choose another level",
					ErrDurability, addr, cfg["appendonly"])
			}
		case DurabilityReplicated:
			info, err := c.Info(ctx, "replication").Result()
			if err != nil {
				if rediscall.IsConnError(err) || ctx.Err() != nil {
					return fmt.Errorf("redis at %s: info replication: %w", addr, err)
				}
				log.Warn("redis: INFO is not allowed; cannot count the replicas for durability replicated", "addr", addr)
				return nil
			}
			if n := infoInt(info, "connected_slaves"); n < acks {
				log.Warn("redis: fewer connected replicas than durability replicated waits for: orders answer 503 until they are back",
					"addr", addr, "replicas", n, "acks", acks)
			}
		}
		return nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, check)
	case *redis.Client:
		return check(ctx, c)
	}
	return fmt.Errorf("%w: durability %s needs a single, Sentinel or Cluster client, not %T", ErrDurability, level, rdb)
}

// infoInt is the integer field name of an INFO answer (-1 if missing).
func infoInt(info, name string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return -1
}
