package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// adjustLookback is how far back RepairAdjustments looks: far inside
// lua.AdjustMarkerTTL, so an expired marker is never mistaken for a missing one.
const adjustLookback = 24 * time.Hour

// RepairAdjustments completes stock repairs whose MySQL half committed but
// whose Redis half did not (the admin request failed on Redis and was not
// sent again): for every ADJUST flow of the last 24 hours whose marker is
// missing on shard 0, it runs lua.ApplyAdjustment, which applies the delta at most
// once per repairNo (a racing admin request and this repair cannot both
// apply it). A shard whose stock hash is missing (Redis lost its data) is
// skipped: the product must be reloaded first. It returns the repairNos it
// applied.
func RepairAdjustments(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store) ([]string, error) {
	flows, err := store.RecentAdjustFlows(ctx, adjustLookback)
	if err != nil {
		return nil, err
	}
	var applied []string
	for _, f := range flows {
		done, err := lua.AdjustmentApplied(ctx, rdb, f.ProductID, f.RepairNo)
		if err != nil {
			return applied, err
		}
		if done {
			continue
		}
		ok, _, err := lua.ApplyAdjustment(ctx, rdb, f.ProductID, f.RepairNo, f.Delta)
		switch {
		case errors.Is(err, lua.ErrNotFound), errors.Is(err, lua.ErrNegativeAdjust), errors.Is(err, lua.ErrStockCorrupt):
			continue // reported by reconcile as drift (or as unreadable data)
		case err != nil:
			return applied, err
		case ok:
			applied = append(applied, f.RepairNo)
		}
	}
	return applied, nil
}
