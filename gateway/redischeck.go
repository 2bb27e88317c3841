package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-sh/stampede/gateway/rediscall"
)

// ErrRedisEviction is returned by CheckRedis for a Redis that may evict keys.
var ErrRedisEviction = errors.New("redis maxmemory-policy must be noeviction")

// redisNode is what one Redis node's settings say.
type redisNode struct {
	addr          string
	policy        string // maxmemory-policy; "" when CONFIG is not allowed
	noPersistence bool   // appendonly no and save ""
}

// redisConfState is the last watch of Redis's settings (Server.redisConf).
type redisConfState struct {
	at     time.Time
	unsafe []string // one message per node whose policy may evict keys
	noPers []string // addresses of nodes without persistence
}

// inspectRedis reads maxmemory-policy, appendonly and save of every node
// (every master of a cluster). A node where CONFIG is disabled or renamed
// (managed Redis) reports policy "" and is logged once by the caller.
func inspectRedis(ctx context.Context, rdb redis.UniversalClient) ([]redisNode, error) {
	var mu sync.Mutex
	var nodes []redisNode
	check := func(ctx context.Context, c *redis.Client) error {
		n := redisNode{addr: c.Options().Addr}
		cfg, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			if ctx.Err() != nil || rediscall.IsConnError(err) {
				return fmt.Errorf("redis at %s: config get: %w", n.addr, err)
			}
		} else {
			n.policy = cfg["maxmemory-policy"]
			aof, err1 := c.ConfigGet(ctx, "appendonly").Result()
			save, err2 := c.ConfigGet(ctx, "save").Result()
			n.noPersistence = err1 == nil && err2 == nil && strings.EqualFold(aof["appendonly"], "no") && strings.TrimSpace(save["save"]) == ""
		}
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.Client:
		err = check(ctx, c)
	case *redis.ClusterClient:
		err = c.ForEachShard(ctx, check)
	case *redis.Ring:
		err = c.ForEachShard(ctx, check)
	}
	return nodes, err
}

func unsafePolicy(n redisNode) error {
	if n.policy == "" || n.policy == "noeviction" {
		return nil
	}
	return fmt.Errorf("%w: redis at %s has maxmemory-policy %q, which lets Redis evict stock, idempotency and reservation keys under memory pressure (oversold stock, lost reservations); run CONFIG SET maxmemory-policy noeviction (and persist it in redis.conf)",
		ErrRedisEviction, n.addr, n.policy)
}

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
// returns nil: the operator must then check the policy by other means. A
// serving gateway keeps watching the same settings (Config.RedisCheckInterval).
func CheckRedis(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	nodes, err := inspectRedis(ctx, rdb)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.policy == "" {
			log.Warn("redis: CONFIG GET is not allowed; cannot verify maxmemory-policy is noeviction (evicted stock keys mean oversell and lost reservations)",
				"addr", n.addr)
		}
		if err := unsafePolicy(n); err != nil {
			return err
		}
		if n.noPersistence {
			log.Warn("redis: persistence is off (appendonly no, save \"\"): a Redis restart loses stock and intake entries not yet written to MySQL",
				"addr", n.addr)
		}
	}
	return nil
}

// Watching Redis's settings. CheckRedis refuses an unsafe Redis at start-up,
// but the policy can be changed on a running server (CONFIG SET
// maxmemory-policy allkeys-lru). So a serving gateway re-reads the settings
// every Config.RedisCheckInterval (watchRedisConfig, started by Serve):
// while any node's policy is not noeviction the gateway is not ready
// (/readyz 503 naming the node and the policy) and
// stampede_redis_unsafe_eviction_nodes is above 0 (alert
// StampedeRedisEvictionUnsafe); nodes without persistence are counted in
// stampede_redis_no_persistence_nodes (alert StampedeRedisPersistenceOff).
// Back to noeviction, the next watch makes it ready again. Orders are still
// served meanwhile: readiness takes the instance out of the load balancer,
// and the alert calls the operator. A watch that cannot reach Redis keeps
// the last state (the Redis probe of /readyz reports the outage itself).

// watchRedisConfig runs checkRedisConfig now and every RedisCheckInterval
// until ctx ends; the channel closes when it stopped.
func (s *Server) watchRedisConfig(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.RedisCheckInterval)
		defer t.Stop()
		for {
			s.checkRedisConfig(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return done
}

// checkRedisConfig reads Redis's settings once and publishes the result to
// readiness and the metrics, logging every change.
func (s *Server) checkRedisConfig(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
	nodes, err := inspectRedis(cctx, s.rdb)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug("redis settings watch failed; keeping the last state", "err", err)
		}
		return
	}
	st := &redisConfState{at: time.Now()}
	for _, n := range nodes {
		if uerr := unsafePolicy(n); uerr != nil {
			st.unsafe = append(st.unsafe, uerr.Error())
		}
		if n.noPersistence {
			st.noPers = append(st.noPers, n.addr)
		}
	}
	prev := s.redisConf.Swap(st)
	s.metrics.redisUnsafe.Set(float64(len(st.unsafe)))
	s.metrics.redisNoPersist.Set(float64(len(st.noPers)))
	was := prev != nil && len(prev.unsafe) > 0
	switch {
	case len(st.unsafe) > 0 && (!was || strings.Join(prev.unsafe, "") != strings.Join(st.unsafe, "")):
		s.log.Error("redis may evict keys: gateway not ready until maxmemory-policy is noeviction again", "problems", st.unsafe)
	case len(st.unsafe) == 0 && was:
		s.log.Info("redis maxmemory-policy is noeviction again: gateway ready")
	}
	if len(st.noPers) > 0 && (prev == nil || len(prev.noPers) == 0) {
		s.log.Warn("redis: persistence is off (appendonly no, save \"\"): a Redis restart loses stock and intake entries not yet written to MySQL",
			"addrs", st.noPers)
	}
}

// redisConfError is the readiness error of the last watch, nil when safe
// (or not watched yet).
func (s *Server) redisConfError() error {
	st := s.redisConf.Load()
	if st == nil || len(st.unsafe) == 0 {
		return nil
	}
	return errors.New("redis: " + strings.Join(st.unsafe, "; "))
}
