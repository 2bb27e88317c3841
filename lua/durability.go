package lua

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated is returned by WaitReplicas when WAIT answered before
// enough replicas acknowledged.
var ErrNotReplicated = errors.New("redis: not yet on enough replicas")

// WaitKey is the wait key (Keys.Wait) of the slot of key, which must carry a
// hash tag ("stampede:{p:7:0}:intake" → "stampede:{p:7:0}:wait"); a key
// without one gets Prefix + "wait".
func WaitKey(key string) string {
	i := strings.IndexByte(key, '{')
	j := strings.IndexByte(key[i+1:], '}')
	if i < 0 || j < 0 {
		return Prefix + "wait"
	}
	return Prefix + key[i:i+j+2] + ":wait"
}

// WaitOn makes the writes node (a primary) answered so far reach acks
// replicas, waiting at most timeout: SET waitKey, then WAIT acks timeout, in
// one pipeline on one connection. WAIT covers the writes of its own
// connection only; the SET's replication offset is past every write the
// primary answered before it, on any connection, so the pair is a barrier
// for all of them. waitKey must be in a slot node owns (WaitKey). It returns
// nil, ErrNotReplicated, or the Redis error.
func WaitOn(ctx context.Context, node *redis.Client, waitKey string, acks int, timeout time.Duration) error {
	cmds, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, waitKey, "1", 10*time.Second)
		p.Do(ctx, "WAIT", acks, timeout.Milliseconds())
		return nil
	})
	if err != nil {
		return err
	}
	if n, _ := cmds[1].(*redis.Cmd).Int64(); n < int64(acks) {
		return fmt.Errorf("%w: %d of %d replicas acknowledged within %s", ErrNotReplicated, n, acks, timeout)
	}
	return nil
}

// WaitReplicas is WaitOn for the primaries of keys: once per primary of a
// cluster (one SET + WAIT each, in turn), once for a single or Sentinel
// client.
func WaitReplicas(ctx context.Context, rdb redis.UniversalClient, keys []string, acks int, timeout time.Duration) error {
	switch c := rdb.(type) {
	case *redis.Client:
		if len(keys) == 0 {
			return nil
		}
		return WaitOn(ctx, c, WaitKey(keys[0]), acks, timeout)
	case *redis.ClusterClient:
		seen := map[string]bool{}
		for _, k := range keys {
			node, err := c.MasterForKey(ctx, k)
			if err != nil {
				return err
			}
			addr := node.Options().Addr
			if seen[addr] {
				continue
			}
			seen[addr] = true
			if err := WaitOn(ctx, node, WaitKey(k), acks, timeout); err != nil {
				c.ReloadState(ctx)
				return fmt.Errorf("redis at %s: %w", addr, err)
			}
		}
		return nil
	}
	return fmt.Errorf("redis: WAIT needs a single, Sentinel or Cluster client, not %T", rdb)
}
