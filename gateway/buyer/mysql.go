package buyer

import (
	"time"

	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// The order path's MySQL read and write (package intake holds no MySQL
// code): New wires them into it.

// productShards is the shard count of a product Redis does not list, from
// the product cache.
func (s *API) productShards(productID int64) (int, error) {
	p, err := s.productRow(productID)
	if err != nil {
		return 0, err
	}
	return max(p.Shards, 1), nil
}

// persistSync writes one accepted reservation to MySQL (synchronous intake,
// Config.SyncIntake); nil means committed.
func (s *API) persistSync(r order.Reservation) error {
	p, err := s.productRow(r.ProductID) // the item's name snapshot; cached
	if err == nil {
		ctx, cancel := s.callCtx(s.cfg.StoreTimeout)
		_, err = s.store.InsertReservationsWithin(ctx, []order.Reservation{r}, map[int64]string{r.ProductID: p.Name}, s.cfg.RequestTTL)
		cancel()
	}
	return err
}

// productMissRefresh bounds how often an unknown productId makes the gateway
// re-read the product table.
const productMissRefresh = 100 * time.Millisecond

// productRow is productID's row from the product cache, re-reading MySQL
// (at most once per productMissRefresh) for a product created since.
func (s *API) productRow(productID int64) (persistence.Product, error) {
	snap, err := s.products.Get(s.cfg.StoreTimeout)
	if err != nil {
		return persistence.Product{}, err
	}
	i, ok := snap.ByID[productID]
	if !ok {
		if snap, err = s.products.RefreshOlderThan(productMissRefresh, s.cfg.StoreTimeout); err != nil {
			return persistence.Product{}, err
		}
		if i, ok = snap.ByID[productID]; !ok {
			return persistence.Product{}, httpapi.ErrProductNotFound
		}
	}
	return snap.List[i], nil
}
