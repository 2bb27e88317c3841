package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The deployment identity in Redis (issue 27). A Redis DB serves one
// Stampede database: it carries that database's identity
// (persistence.Store.DeploymentID) in DeploymentKey — on a Redis Cluster in
// one key per master (DeploymentKeys), so every master says whose data it
// holds. Roles claim an unmarked Redis DB at start (ClaimDeployment) and
// refuse one that carries another identity; `stampede redis-takeover`
// (Takeover) hands a Redis DB over once it holds no live reservations.

// DeploymentKey holds the deployment identity of a single Redis server or
// Sentinel group (the DB selected). Not hash-tagged; no script reads it.
const DeploymentKey = Prefix + "deployment"

// ErrDeploymentMismatch: the Redis DB carries another deployment's
// identity. A *DeploymentError says which.
var ErrDeploymentMismatch = errors.New("lua: redis db belongs to another deployment")

// DeploymentError is an ErrDeploymentMismatch.
type DeploymentError struct {
	Ours   string // this database's identity
	Theirs string // the identity the Redis DB carries
	Key    string // the key that carries it
}

func (e *DeploymentError) Error() string {
	return fmt.Sprintf("lua: redis key %s holds deployment %s, not this database's %s", e.Key, e.Theirs, e.Ours)
}

func (e *DeploymentError) Unwrap() error { return ErrDeploymentMismatch }

// DeploymentKeys returns the keys that carry the identity: DeploymentKey on
// a single server or Sentinel client; on a cluster client one key per
// master, "stampede:deployment:{<n>}" with the smallest n whose slot the
// master serves (by the client's slot map). The keys of one master move
// with their slots when slots are migrated; another master then gets its own
// key at the next claim.
func DeploymentKeys(ctx context.Context, rdb redis.UniversalClient) ([]string, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return []string{DeploymentKey}, nil
	}
	var mu sync.Mutex
	masters := map[string]bool{}
	if err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		masters[c.Options().Addr] = true
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, fmt.Errorf("lua: list cluster masters: %w", err)
	}
	var keys []string
	found := map[string]bool{}
	// 16,384 slots: a master serving any slot is hit well before n reaches
	// a few hundred thousand.
	for n := 0; len(found) < len(masters) && n < 1<<20; n++ {
		key := DeploymentKey + ":{" + strconv.Itoa(n) + "}"
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("lua: master of %s: %w", key, err)
		}
		if addr := c.Options().Addr; masters[addr] && !found[addr] {
			found[addr] = true
			keys = append(keys, key)
		}
	}
	if len(found) < len(masters) {
		return nil, fmt.Errorf("lua: no deployment key found for %d of %d cluster masters", len(masters)-len(found), len(masters))
	}
	return keys, nil
}

// ClaimDeployment makes the Redis DB carry identity id: every key of
// DeploymentKeys that is missing is set to id (SET NX). claimed reports
// whether any was missing (an unmarked Redis DB: an empty one, or one from
// before identities existed). A key that holds another identity, on any
// master, is a *DeploymentError (ErrDeploymentMismatch); keys found
// missing before it are claimed all the same.
func ClaimDeployment(ctx context.Context, rdb redis.UniversalClient, id string) (claimed bool, err error) {
	keys, err := DeploymentKeys(ctx, rdb)
	if err != nil {
		return false, err
	}
	for _, key := range keys {
		ok, err := rdb.SetNX(ctx, key, id, 0).Result()
		if err != nil {
			return claimed, fmt.Errorf("lua: claim %s: %w", key, err)
		}
		if ok {
			claimed = true
			continue
		}
		have, err := rdb.Get(ctx, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return claimed, fmt.Errorf("lua: read %s: %w", key, err)
		}
		if have != id {
			return claimed, &DeploymentError{Ours: id, Theirs: have, Key: key}
		}
	}
	return claimed, nil
}

// Live is what Redis holds of reservations that no database has yet: the
// entries of the intake streams (accepted, not yet stored by a writer, which
// deletes them after its commit) and the pending order records a writer has
// not deleted yet.
type Live struct {
	IntakeEntries int64    // Σ XLEN of the registered intake streams (dead streams not counted)
	OrderRecords  int64    // keys "…:order:<orderNo>"
	Examples      []string // up to 5 keys holding them
}

// Any reports whether anything is live.
func (l Live) Any() bool { return l.IntakeEntries > 0 || l.OrderRecords > 0 }

// LiveReservations reads Live: XLEN of every stream of StreamsKey, and a
// SCAN of every master for pending order records. It walks the whole
// keyspace once: an operator command, not for a hot path.
func LiveReservations(ctx context.Context, rdb redis.UniversalClient) (Live, error) {
	var live Live
	streams, err := rdb.SMembers(ctx, StreamsKey).Result()
	if err != nil {
		return live, fmt.Errorf("lua: list intake streams: %w", err)
	}
	for _, s := range streams {
		n, err := rdb.XLen(ctx, s).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return live, fmt.Errorf("lua: length of %s: %w", s, err)
		}
		if n > 0 {
			live.IntakeEntries += n
			if len(live.Examples) < 5 {
				live.Examples = append(live.Examples, fmt.Sprintf("%s (%d entries)", s, n))
			}
		}
	}
	var mu sync.Mutex
	err = eachNode(ctx, rdb, func(ctx context.Context, c redis.Cmdable) error {
		return scanKeys(ctx, c, Prefix+"{p:*}:order:*", func(keys []string) error {
			mu.Lock()
			defer mu.Unlock()
			live.OrderRecords += int64(len(keys))
			for _, k := range keys {
				if len(live.Examples) < 5 {
					live.Examples = append(live.Examples, k)
				}
			}
			return nil
		})
	})
	return live, err
}

// DeleteAll deletes every Stampede key ("stampede:*") of the Redis DB, on
// every master of a cluster (SCAN and UNLINK, 500 at a time), and returns
// how many it deleted. Takeover's first step; it does not check anything.
func DeleteAll(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	var mu sync.Mutex
	var deleted int64
	err := eachNode(ctx, rdb, func(ctx context.Context, c redis.Cmdable) error {
		return scanKeys(ctx, c, Prefix+"*", func(keys []string) error {
			// One UNLINK per key: on a cluster the keys of one batch are
			// in many slots.
			pipe := c.Pipeline()
			for _, k := range keys {
				pipe.Unlink(ctx, k)
			}
			cmds, err := pipe.Exec(ctx)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			for _, cmd := range cmds {
				if ic, ok := cmd.(*redis.IntCmd); ok {
					deleted += ic.Val()
				}
			}
			return nil
		})
	})
	return deleted, err
}

// ErrLiveReservations: Takeover found live reservations (a *LiveError).
var ErrLiveReservations = errors.New("lua: redis db holds live reservations")

// LiveError is an ErrLiveReservations with what was found.
type LiveError struct{ Live Live }

func (e *LiveError) Error() string {
	return fmt.Sprintf("lua: redis db holds %d intake entries and %d pending order records not yet in any database (e.g. %s)",
		e.Live.IntakeEntries, e.Live.OrderRecords, strings.Join(e.Live.Examples, ", "))
}

func (e *LiveError) Unwrap() error { return ErrLiveReservations }

// Takeover hands the Redis DB to deployment id: unless it holds live
// reservations (then *LiveError, nothing changed), it deletes every
// Stampede key (DeleteAll: the other deployment's stock, streams, records
// and identity) and claims the DB for id. The caller must have stopped
// every process of the other deployment: a reservation its gateway accepts
// between the check and the delete is lost with it. deleted counts the keys
// removed; the caller reloads its own products afterwards.
func Takeover(ctx context.Context, rdb redis.UniversalClient, id string) (deleted int64, err error) {
	live, err := LiveReservations(ctx, rdb)
	if err != nil {
		return 0, err
	}
	if live.Any() {
		return 0, &LiveError{Live: live}
	}
	if deleted, err = DeleteAll(ctx, rdb); err != nil {
		return deleted, err
	}
	_, err = ClaimDeployment(ctx, rdb, id)
	return deleted, err
}

// eachNode runs fn on every master of a cluster client, or once on any
// other client.
func eachNode(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, redis.Cmdable) error) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return fn(ctx, c) })
	}
	return fn(ctx, rdb)
}

// scanKeys SCANs c for pattern and hands each non-empty batch to fn.
func scanKeys(ctx context.Context, c redis.Cmdable, pattern string, fn func([]string) error) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, pattern, 500).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := fn(keys); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
