package httpapi

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-sh/stampede/persistence"
)

// ProductLister reads the product table (*persistence.Store is one).
type ProductLister interface {
	ListProducts(ctx context.Context) ([]persistence.Product, error)
}

// ProductCache keeps the product rows for ttl so that a sale's product page,
// the most requested read, costs MySQL one query per second per gateway.
type ProductCache struct {
	store ProductLister
	ttl   time.Duration
	log   *slog.Logger
	snap  atomic.Pointer[ProductSnapshot]
	mu    sync.Mutex // one refresh at a time
}

// ProductSnapshot is one immutable read of the product table.
type ProductSnapshot struct {
	At   time.Time
	List []persistence.Product // oldest first
	ByID map[int64]int         // id → index in List
}

// staleLimit is how long a snapshot may be served when MySQL cannot be read.
const staleLimit = time.Minute

func NewProductCache(store ProductLister, ttl time.Duration, log *slog.Logger) *ProductCache {
	return &ProductCache{store: store, ttl: ttl, log: log}
}

// Get returns a snapshot at most ttl old, reading MySQL when needed. If MySQL
// fails it serves the previous snapshot for up to staleLimit.
func (c *ProductCache) Get(timeout time.Duration) (*ProductSnapshot, error) {
	if sn := c.snap.Load(); sn != nil && time.Since(sn.At) < c.ttl {
		return sn, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.snap.Load()
	if old != nil && time.Since(old.At) < c.ttl { // refreshed while we waited
		return old, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	list, err := c.store.ListProducts(ctx)
	if err != nil {
		if old != nil && time.Since(old.At) < staleLimit {
			c.log.Warn("product cache: serving stale products", "age", time.Since(old.At).String(), "err", err)
			return old, nil
		}
		return nil, err
	}
	sn := &ProductSnapshot{At: time.Now(), List: list, ByID: make(map[int64]int, len(list))}
	for i, p := range list {
		sn.ByID[p.ID] = i
	}
	c.snap.Store(sn)
	return sn, nil
}

// Invalidate makes the next get read MySQL (after a product was created here).
// It waits for a refresh in flight, whose read may predate the new product.
func (c *ProductCache) Invalidate() {
	c.mu.Lock()
	c.snap.Store(nil)
	c.mu.Unlock()
}

// RefreshOlderThan re-reads MySQL unless the snapshot is younger than minAge.
func (c *ProductCache) RefreshOlderThan(minAge, timeout time.Duration) (*ProductSnapshot, error) {
	c.mu.Lock()
	if sn := c.snap.Load(); sn != nil && time.Since(sn.At) < minAge {
		c.mu.Unlock()
		return sn, nil
	}
	c.snap.Store(nil)
	c.mu.Unlock()
	return c.Get(timeout)
}
