package main

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
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
// values. It returns when ctx ends.
func feedProducts(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, hub *push.Hub, period time.Duration) error {
	return everyPeriod(ctx, store, period, 5*time.Second, func(p persistence.Product) {
		var sum int64
		for shard := range max(p.Shards, 1) {
			n, err := rdb.HGet(ctx, lua.ShardKeys(p.ID, shard).Stock(), "available").Int64()
			if err != nil {
				return
			}
			sum += n
		}
		hub.PublishProduct(p.ID, sum, sum <= 0)
	})
}

// everyPeriod calls each for every product once per period until ctx ends
// (then it returns nil). The product list is read from MySQL again once it
// is older than relist; a failed read keeps the previous list.
func everyPeriod(ctx context.Context, store *persistence.Store, period, relist time.Duration, each func(persistence.Product)) error {
	t := time.NewTicker(period)
	defer t.Stop()
	var products []persistence.Product
	var listed time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if time.Since(listed) > relist {
			if ps, err := store.ListProducts(ctx); err == nil {
				products, listed = ps, time.Now()
			}
		}
		for _, p := range products {
			each(p)
		}
	}
}
