package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// transferMarkerTTL is the life of the receiver's marker of a transfer this
// repair completes: the gateway's default RequestTTL, far longer than any race
// with the mover it guards against.
const transferMarkerTTL = order.DefaultRequestTTL

// RepairTransfers completes the stock transfers between the shards of
// every sharded product that a crashed mover left half-done
// (lua.RepairTransfers: units taken from a donor and recorded but not yet
// added to the receiver, counted in no shard). The order path completes
// them too before it calls a product sold out; this repair serves products
// nobody is buying any more, and runs before each reconciliation so the
// drift it reports is not one of units in flight. It returns how many
// transfers it completed; a product that fails is reported in the joined
// error and the others are still repaired.
func RepairTransfers(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store) (int, error) {
	products, err := store.ListProducts(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, p := range products {
		if p.Shards <= 1 {
			continue
		}
		done, err := lua.RepairTransfers(ctx, rdb, p.ID, p.Shards, transferMarkerTTL)
		n += done
		if err != nil {
			errs = append(errs, fmt.Errorf("transfers of product %d: %w", p.ID, err))
		}
	}
	return n, errors.Join(errs...)
}
