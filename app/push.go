package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/push"
)

// pushSnapshots serves the push hub's snapshots from MySQL.
type pushSnapshots struct{ store *persistence.Store }

func toSnapshot(o persistence.Order) push.Snapshot {
	return push.Snapshot{OrderNo: o.OrderNo, UserID: o.UserID, Status: o.Status, Version: o.Version,
		UpdatedAt: o.UpdatedAt, PayDeadline: o.PayDeadline}
}

// OrderSnapshot returns the user's order, or push.ErrNotFound for a missing
// order or another user's.
func (s pushSnapshots) OrderSnapshot(ctx context.Context, userID int64, orderNo string) (push.Snapshot, error) {
	o, err := s.store.GetOrder(ctx, orderNo)
	if errors.Is(err, persistence.ErrNotFound) || (err == nil && o.UserID != userID) {
		return push.Snapshot{}, push.ErrNotFound
	}
	if err != nil {
		return push.Snapshot{}, err
	}
	return toSnapshot(o), nil
}

// RecentOrders returns the user's newest orders.
func (s pushSnapshots) RecentOrders(ctx context.Context, userID int64, limit int) ([]push.Snapshot, error) {
	orders, _, err := s.store.ListOrders(ctx, userID, limit, "")
	if err != nil {
		return nil, err
	}
	out := make([]push.Snapshot, len(orders))
	for i, o := range orders {
		out[i] = toSnapshot(o)
	}
	return out, nil
}

// feedProducts polls every loaded product's Redis available units every
// period and hands them to the hub, which throttles and drops unchanged
// values. It returns when ctx ends. Failures back off and log as
// everyPeriod says (loop "push_products").
func feedProducts(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, hub *push.Hub, period time.Duration,
	log *slog.Logger, m *pipeline.Metrics) error {
	return everyPeriod(ctx, store, period, 5*time.Second, feedFailures("push_products", "push: product feed", log, m, period),
		func(p persistence.Product) error {
			var sum int64
			for shard := range max(p.Shards, 1) {
				n, err := rdb.HGet(ctx, lua.ShardKeys(p.ID, shard).Stock(), "available").Int64()
				switch {
				case errors.Is(err, redis.Nil):
					return nil // not loaded (yet): nothing to show
				case err != nil && !isRedisReply(err):
					return fmt.Errorf("redis: product %d: %w", p.ID, err)
				case err != nil:
					return nil // this product's data (not an integer): nothing to show, the others go on
				}
				sum += n
			}
			hub.PublishProduct(p.ID, sum, sum <= 0)
			return nil
		})
}

// isRedisReply reports whether err is an answer of Redis (about the data)
// rather than a failure to reach it.
func isRedisReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) || errors.Is(err, strconv.ErrSyntax) || errors.Is(err, strconv.ErrRange)
}

// feedFailures is the FailureLog of a push feed: backoff from period to 10s.
func feedFailures(loop, what string, log *slog.Logger, m *pipeline.Metrics, period time.Duration) *pipeline.FailureLog {
	return pipeline.NewFailureLog(loop, what, log, m, period, 10*time.Second)
}

// everyPeriod calls each for every product once per period until ctx ends
// (then it returns nil). The product list is read from MySQL again once it
// is older than relist; a failed read keeps the previous list. A failed read
// or an each that fails (a dependency down: it returns an error) ends the
// round and pauses the loop by fails' backoff; fails logs the first failure
// of a run and the recovery, and counts every failure.
func everyPeriod(ctx context.Context, store *persistence.Store, period, relist time.Duration, fails *pipeline.FailureLog,
	each func(persistence.Product) error) error {
	t := time.NewTicker(period)
	defer t.Stop()
	var products []persistence.Product
	var listed, resume time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if time.Now().Before(resume) {
			continue
		}
		err := func() error {
			if time.Since(listed) > relist {
				ps, err := store.ListProducts(ctx)
				if err != nil {
					return fmt.Errorf("mysql: list products: %w", err)
				}
				products, listed = ps, time.Now()
			}
			for _, p := range products {
				if err := each(p); err != nil {
					return err
				}
			}
			return nil
		}()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			resume = time.Now().Add(fails.Fail(err))
		default:
			fails.OK()
		}
	}
}
