package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// LostConfig bounds RepairLostReservations.
type LostConfig struct {
	// Grace is how old (by its accepted time) a reservation must be before
	// it may count as lost. Default 2m.
	Grace time.Duration
	// MaxScan is the most order records examined per shard per call.
	// Default 5000.
	MaxScan int
	// ReleaseMarkerTTL is the life of the release marker (as the consumer's).
	// Default 7 days.
	ReleaseMarkerTTL time.Duration
}

// LostReport is what RepairLostReservations did.
type LostReport struct {
	Scanned  int      `json:"scanned"`  // pending order records examined
	Released []string `json:"released"` // orderNos released
}

// RepairLostReservations releases Redis reservations that never became
// orders (docs/spec.md §1 "sweeper": reservations lost between Redis and MySQL, e.g.
// an intake entry lost with a Redis failover, or a gateway that died between
// reserve and its synchronous MySQL write). For every shard of every product
// it SCANs the shard's pending order records (lua.Keys.Order, written by
// reserve.lua with the accepted time t) and releases, with lua.Release
// (idempotent by its marker), an orderNo only when all of these hold:
//
//  1. it was accepted more than Grace ago and was not released before;
//  2. its intake entry is no longer in the shard's stream: the oldest entry
//     still there (unacked ones included — writers delete only what they
//     acknowledged after the commit) is younger than t, or the stream is
//     empty. Reserve appends the entry in the same script that writes the
//     record, so the entry's id time is t;
//  3. MySQL has no order_info row for it — checked after 2, so an entry
//     written and deleted meanwhile is seen in MySQL.
//
// An order in the stream or in MySQL is therefore never released.
func RepairLostReservations(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, cfg LostConfig) (LostReport, error) {
	cfg.Grace = cmp.Or(cfg.Grace, 2*time.Minute)
	cfg.ReleaseMarkerTTL = cmp.Or(cfg.ReleaseMarkerTTL, 7*24*time.Hour)
	cfg.MaxScan = cmp.Or(cfg.MaxScan, 5000)
	rep := LostReport{Released: []string{}}
	products, err := store.ListProducts(ctx)
	if err != nil {
		return rep, err
	}
	for _, p := range products {
		for sh := range max(p.Shards, 1) {
			if err := repairShard(ctx, rdb, store, lua.ShardKeys(p.ID, sh), cfg, &rep); err != nil {
				if productFault(err) {
					continue // that shard's data is unusable (reconcile reports it): go on with the others
				}
				return rep, fmt.Errorf("lost reservations of product %d shard %d: %w", p.ID, sh, err)
			}
		}
	}
	return rep, nil
}

// lostIDMargin: an intake entry id may be later than its record's accepted
// time by this much and still be recognised.
const lostIDMargin = time.Minute

// repairShard runs the three checks of RepairLostReservations on shard k
// and releases what passes them all (rep.Released).
func repairShard(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, k lua.Keys, cfg LostConfig, rep *LostReport) error {
	old, err := oldRecords(ctx, rdb, k, cfg, rep)
	if err != nil || len(old) == 0 {
		return err
	}
	candidates, err := notInStream(ctx, rdb, k, old)
	if err != nil || len(candidates) == 0 {
		return err
	}
	return releaseUnstored(ctx, rdb, store, k, cfg, candidates, rep)
}

// oldRecords SCANs (on the node owning the shard's slot) up to MaxScan of
// the shard's pending order records (rep.Scanned) and returns those of
// reservations accepted more than Grace ago: check 1's first half.
func oldRecords(ctx context.Context, rdb redis.UniversalClient, k lua.Keys, cfg LostConfig, rep *LostReport) ([]lua.PendingOrder, error) {
	node := redis.Cmdable(rdb)
	if cc, ok := rdb.(*redis.ClusterClient); ok { // SCAN the node that owns the shard's slot
		c, err := cc.MasterForKey(ctx, k.Stock())
		if err != nil {
			return nil, err
		}
		node = c
	}
	prefix := k.Order("")
	cutoff := time.Now().Add(-cfg.Grace).UnixMilli()
	var old []lua.PendingOrder
	var cursor uint64
	scanned := 0
	for {
		keys, next, err := node.Scan(ctx, cursor, prefix+"*", 500).Result()
		if err != nil {
			return nil, err
		}
		for _, key := range keys {
			if scanned >= cfg.MaxScan {
				break
			}
			scanned++
			po, err := lua.ReadPendingOrder(ctx, rdb, k, strings.TrimPrefix(key, prefix))
			switch {
			case errors.Is(err, lua.ErrNoRecord), errors.Is(err, lua.ErrStockCorrupt):
				continue // gone since the SCAN, or unusable: not a reservation to give back
			case err != nil:
				return nil, err
			case po.Quantity <= 0 || po.AcceptedMs > cutoff:
				continue
			}
			old = append(old, po)
		}
		cursor = next
		if cursor == 0 || scanned >= cfg.MaxScan {
			break
		}
	}
	rep.Scanned += scanned
	return old, nil
}

// notInStream is the reservations of old that were not released before
// (check 1's second half) and whose intake entry can no longer be in the
// shard's stream (check 2).
func notInStream(ctx context.Context, rdb redis.UniversalClient, k lua.Keys, old []lua.PendingOrder) ([]lua.PendingOrder, error) {
	oldest := int64(-1) // the oldest entry left in the stream; -1: stream empty
	first, err := rdb.XRangeN(ctx, k.Intake(), "-", "+", 1).Result()
	if err != nil {
		return nil, err
	}
	if len(first) == 1 {
		ms, _, _ := strings.Cut(first[0].ID, "-")
		if oldest, err = strconv.ParseInt(ms, 10, 64); err != nil {
			return nil, fmt.Errorf("stream id %q: %w", first[0].ID, err)
		}
	}
	var candidates []lua.PendingOrder
	for _, po := range old {
		// The entry's id time is t, or later if the Redis clock went back
		// (stream ids never decrease): keep a wide margin.
		if oldest >= 0 && oldest <= po.AcceptedMs+lostIDMargin.Milliseconds() {
			continue // its entry may still be in the stream
		}
		if n, err := rdb.Exists(ctx, k.Released(po.OrderNo)).Result(); err != nil {
			return nil, err
		} else if n > 0 {
			continue // released before
		}
		candidates = append(candidates, po)
	}
	return candidates, nil
}

// releaseUnstored releases (lua.Release) the candidates MySQL has no order
// for (check 3).
func releaseUnstored(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, k lua.Keys, cfg LostConfig, candidates []lua.PendingOrder, rep *LostReport) error {
	nos := make([]string, len(candidates))
	for i, po := range candidates {
		nos[i] = po.OrderNo
	}
	inMySQL, err := store.ExistingOrders(ctx, nos)
	if err != nil {
		return err
	}
	for _, po := range candidates {
		if inMySQL[po.OrderNo] {
			continue
		}
		released, _, err := lua.Release(ctx, rdb, k, po.OrderNo, po.UserID, po.Quantity, cfg.ReleaseMarkerTTL)
		if err != nil {
			return err
		}
		if released {
			rep.Released = append(rep.Released, po.OrderNo)
		}
	}
	return nil
}
