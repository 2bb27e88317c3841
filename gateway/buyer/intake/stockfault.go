package intake

import (
	"sync"
	"time"
)

// Fault isolation per product. When the stock data of one product is
// unusable — reserve.lua finds a numeric field that is not an integer, or a
// script fails at run time on the product's keys — lua answers
// ErrStockCorrupt. That is the product's fault, not Redis's: the circuit
// breaker counts it as a success (gateway/rediscall), /readyz stays ready, orders
// for other products go on, and this product answers 500 STOCK_CORRUPT
// until an operator repairs its hash (stock repair, or `HSET … available
// <n>` after `stampede reconcile` shows the right count). Each such answer
// counts in stampede_stock_corrupt_total{product} (alert
// StampedeStockCorrupt) and is logged at most once per corruptLogEvery per
// product.

// corruptLogEvery bounds the error log of one corrupt product under traffic.
const corruptLogEvery = 10 * time.Second

type corruptLog struct {
	mu   sync.Mutex
	last map[int64]time.Time
}

func (s *Intake) StockCorrupt(productID int64, err error) {
	s.metrics.StockCorrupt(productID)
	now := time.Now()
	s.corrupt.mu.Lock()
	if s.corrupt.last == nil {
		s.corrupt.last = map[int64]time.Time{}
	}
	due := now.Sub(s.corrupt.last[productID]) >= corruptLogEvery
	if due {
		s.corrupt.last[productID] = now
	}
	s.corrupt.mu.Unlock()
	if due {
		s.log.Error("product stock data in Redis is corrupt; its orders answer 500 STOCK_CORRUPT until it is repaired",
			"productId", productID, "err", err)
	}
}
