package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrRedisEviction is returned by CheckRedis for a Redis that may evict keys.
var ErrRedisEviction = errors.New("redis maxmemory-policy must be noeviction")

// CheckRedis inspects the configuration of every Redis node (every shard of a
// cluster) before the gateway serves:
//
//   - maxmemory-policy other than noeviction is refused (ErrRedisEviction):
//     under memory pressure Redis would silently evict stock hashes,
//     idempotency records, reservation markers or intake entries — stock
//     reappears (oversell), accepted reservations vanish. With noeviction a
//     full Redis answers OOM errors instead, which the gateway turns into 503.
//   - no persistence (appendonly no and save "") is logged as a warning: a
//     restart then loses stock and not yet written intake entries.
//
// If CONFIG is disabled or renamed (managed Redis), it logs a warning and
// returns nil: the operator must then check the policy by other means.
func CheckRedis(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	check := func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		cfg, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			if ctx.Err() != nil || isConnError(err) {
				return fmt.Errorf("redis at %s: config get: %w", addr, err)
			}
			log.Warn("redis: CONFIG GET is not allowed; cannot verify maxmemory-policy is noeviction (evicted stock keys mean oversell and lost reservations)",
				"addr", addr, "err", err)
			return nil
		}
		if p := cfg["maxmemory-policy"]; p != "" && p != "noeviction" {
			return fmt.Errorf("%w: redis at %s has maxmemory-policy %q, which lets Redis evict stock, idempotency and reservation keys under memory pressure (oversold stock, lost reservations); run CONFIG SET maxmemory-policy noeviction (and persist it in redis.conf)",
				ErrRedisEviction, addr, p)
		}
		aof, err1 := c.ConfigGet(ctx, "appendonly").Result()
		save, err2 := c.ConfigGet(ctx, "save").Result()
		if err1 == nil && err2 == nil && strings.EqualFold(aof["appendonly"], "no") && strings.TrimSpace(save["save"]) == "" {
			log.Warn("redis: persistence is off (appendonly no, save \"\"): a Redis restart loses stock and intake entries not yet written to MySQL",
				"addr", addr)
		}
		return nil
	}
	switch c := rdb.(type) {
	case *redis.Client:
		return check(ctx, c)
	case *redis.ClusterClient:
		return c.ForEachShard(ctx, check)
	case *redis.Ring:
		return c.ForEachShard(ctx, check)
	}
	return nil
}

// isConnError: the error is about reaching Redis, not about the command.
func isConnError(err error) bool {
	var re redis.Error
	return !errors.As(err, &re)
}
