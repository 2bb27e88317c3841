package lua

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// SaleTerms are a product's terms as sale.lua writes them to every shard:
// what an admin may change during the product's life (PATCH, pause, resume,
// end). Version orders the writes: a shard holding a later version keeps it.
type SaleTerms struct {
	ProductID    int64
	Shards       int
	Version      int64 // product.sale_version; each committed admin change bumps it
	Price        int64 // minor units
	PerUserLimit int64 // 0 = none
	MaxPerOrder  int64
	SaleStart    time.Time
	SaleEnd      time.Time
	Paused       bool // reserve.lua answers PAUSED (ErrPaused) while set
}

// WriteSale runs sale.lua on shard k: writes t's terms unless the shard holds
// a later version (written false, nothing changed). ErrNotFound: the shard
// has no stock hash (nothing written; sale.lua never creates one).
func WriteSale(ctx context.Context, rdb redis.Scripter, k Keys, t SaleTerms) (written bool, err error) {
	paused := "0"
	if t.Paused {
		paused = "1"
	}
	res, err := saleScript.Run(ctx, rdb, []string{k.Stock()},
		t.Version, t.Price, t.PerUserLimit, t.MaxPerOrder, t.SaleStart.UnixMilli(), t.SaleEnd.UnixMilli(), paused).Slice()
	if err != nil {
		return false, fmt.Errorf("lua: sale terms of %s: %w", k.Tag(), scriptFault(err, k.Tag()))
	}
	return appliedOnce(res, "sale")
}

// UpdateSale writes t to every shard of its product (WriteSale, one Do per
// shard, shard 0 first). When it returns nil every shard holds t or a later
// version: from then on every reserve.lua call, on any gateway, sees the
// terms (a pause refuses at once). A shard that fails stops it with the
// error; the call is safe to repeat.
func (s *Sharded) UpdateSale(t SaleTerms) error {
	for sh := range max(t.Shards, 1) {
		k := ShardKeys(t.ProductID, sh)
		err := s.Do(func(ctx context.Context) error {
			_, err := WriteSale(ctx, s.RDB, k, t)
			return err
		})
		if err != nil {
			return fmt.Errorf("sale terms of product %d shard %d: %w", t.ProductID, sh, err)
		}
	}
	return nil
}
