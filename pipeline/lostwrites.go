package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// Repairs of writes Redis lost (issue 13). With Redis durability none (or
// aof on a failover) a failover to a replica, or a restart without
// persistence, can drop the last writes the primary answered. The loss that
// leaves no trace — a reservation answered 202 whose intake entry, record
// and decrement are all gone — cannot be repaired: the buyer holds an
// orderNo that never becomes an order (the bench and the failover tests
// count those). What leaves MySQL and Redis disagreeing is repaired here:
//
//   - restored: a live order MySQL holds (written by a writer that read its
//     intake entry before the loss) whose reservation Redis lost: within
//     its lifetime its idempotency record is missing, or names another
//     orderNo (the buyer's retry found it missing and reserved anew; the
//     writer stored that one FAILED, REQUEST_REUSED, and released it).
//     Record, decrement and stock move in one script, so a lost record means
//     a lost decrement. lua.Restore puts the decrement and the user's count
//     back (and the record if missing), once per order (its marker).
//   - released: a CANCELLED or FAILED order (so for ReleaseGrace) whose
//     release Redis lost: the record is still there and names the order,
//     but the release marker is gone. lua.Release gives the units back,
//     once (its marker).
//
// An order whose record is missing and that is no longer live (its
// reservation and its release both lost) is left alone: its units are
// already back. Each repair is counted in
// stampede_reconcile_repairs_total{kind} and logged.

// LostWritesConfig bounds RepairLostWrites.
type LostWritesConfig struct {
	// RequestTTL is the gateways' record lifetime: only orders accepted
	// within it (less a minute) are examined. Default order.DefaultRequestTTL.
	RequestTTL time.Duration
	// ReleaseMarkerTTL is the life of the release marker (as the
	// consumer's). Default 7 days.
	ReleaseMarkerTTL time.Duration
	// ReleaseGrace is how long a CANCELLED or FAILED order must have been
	// so before a missing release counts as lost rather than in flight (the
	// release consumer's). Default 1m.
	ReleaseGrace time.Duration
	// MaxOrders is the most orders examined per product per call. Default 200000.
	MaxOrders int
}

// LostWritesReport is what RepairLostWrites did, by orderNo.
type LostWritesReport struct {
	Examined int      `json:"examined"`
	Restored []string `json:"restored"`
	Released []string `json:"released"`
	// LiveReleased: product → live orders (PROCESSING, WAITING_PAY, PAID)
	// whose release marker exists: Redis gave their units back although
	// MySQL holds them. Not repaired (a release racing the repair could lose
	// the units); reported for the operator.
	LiveReleased map[int64][]string `json:"liveReleased,omitempty"`
}

// RepairLostWrites examines the recent orders of productIDs and repairs
// what Redis lost of them (see above). Safe while orders flow: every repair
// is a script that checks its marker atomically.
func RepairLostWrites(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, productIDs []int64, cfg LostWritesConfig) (LostWritesReport, error) {
	cfg.RequestTTL = cmp.Or(cfg.RequestTTL, order.DefaultRequestTTL)
	cfg.ReleaseMarkerTTL = cmp.Or(cfg.ReleaseMarkerTTL, 7*24*time.Hour)
	cfg.ReleaseGrace = cmp.Or(cfg.ReleaseGrace, time.Minute)
	cfg.MaxOrders = cmp.Or(cfg.MaxOrders, 200000)
	rep := LostWritesReport{Restored: []string{}, Released: []string{}, LiveReleased: map[int64][]string{}}
	now, err := store.Now(ctx)
	if err != nil {
		return rep, err
	}
	since := now.Add(-cfg.RequestTTL + time.Minute)
	for _, pid := range productIDs {
		if n, err := rdb.Exists(ctx, lua.ShardKeys(pid, 0).Stock()).Result(); err != nil {
			return rep, fmt.Errorf("reconcile: stock of %d: %w", pid, err)
		} else if n == 0 {
			continue // not loaded in this Redis: nothing to repair against
		}
		orders, err := store.OrdersSince(ctx, pid, since, cfg.MaxOrders)
		if err != nil {
			return rep, err
		}
		rep.Examined += len(orders)
		for len(orders) > 0 {
			n := min(len(orders), 500)
			if err := repairChunk(ctx, rdb, orders[:n], now, since, cfg, &rep); err != nil {
				return rep, err
			}
			orders = orders[n:]
		}
	}
	return rep, nil
}

func repairChunk(ctx context.Context, rdb redis.UniversalClient, orders []persistence.OrderRef, now, since time.Time, cfg LostWritesConfig, rep *LostWritesReport) error {
	keys := make([]lua.Keys, len(orders))
	recs := make([]*redis.StringCmd, len(orders))
	marks := make([]*redis.IntCmd, len(orders))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, o := range orders {
			_, shard, pid, err := order.ParseNo(o.OrderNo)
			if err != nil {
				return err
			}
			keys[i] = lua.ShardKeys(pid, shard)
			recs[i] = p.Get(ctx, keys[i].Request(o.UserID, o.RequestID))
			marks[i] = p.Exists(ctx, keys[i].Released(o.OrderNo))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("reconcile: read records: %w", err)
	}
	for i, o := range orders {
		rec, rerr := recs[i].Result()
		if rerr != nil && !errors.Is(rerr, redis.Nil) {
			return fmt.Errorf("reconcile: record of %s: %w", o.OrderNo, rerr)
		}
		live := o.Status == order.Processing || o.Status == order.WaitingPay || o.Status == order.Paid
		r, ok := lua.ParseRequestRecord(rec)
		lost := errors.Is(rerr, redis.Nil) || !ok || r.OrderNo != o.OrderNo
		switch {
		case !lost && live && marks[i].Val() == 1:
			_, _, pid, _ := order.ParseNo(o.OrderNo)
			rep.LiveReleased[pid] = append(rep.LiveReleased[pid], o.OrderNo)
		case lost && live:
			ttl := cfg.RequestTTL - now.Sub(o.CreatedAt)
			if o.CreatedAt.Before(since) || ttl < time.Second {
				continue
			}
			ok, err := lua.Restore(ctx, rdb, keys[i], o.OrderNo, o.UserID, o.RequestID, o.Quantity, string(o.Status), ttl)
			if errors.Is(err, lua.ErrNotFound) {
				continue // the product is not loaded in this Redis: nothing to repair against
			}
			if err != nil {
				return err
			}
			if ok {
				rep.Restored = append(rep.Restored, o.OrderNo)
			}
		case !lost && !live && marks[i].Val() == 0 && now.Sub(o.UpdatedAt) > cfg.ReleaseGrace:
			ok, _, err := lua.Release(ctx, rdb, keys[i], o.OrderNo, o.UserID, o.Quantity, cfg.ReleaseMarkerTTL)
			if errors.Is(err, lua.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if ok {
				rep.Released = append(rep.Released, o.OrderNo)
			}
		}
	}
	return nil
}
