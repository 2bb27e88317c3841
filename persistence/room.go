package persistence

import (
	"context"
	"fmt"
)

// CountProcessing is the number of productID's orders in PROCESSING: stored
// by a writer, not yet locked by the order-lock consumer. The admission
// pacer (pipeline/pacer.go) reads it as part of the product's backlog; the
// (product_id, status) index makes it one range count.
func (s *Store) CountProcessing(ctx context.Context, productID int64) (int64, error) {
	var n int64
	err := s.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'PROCESSING'`,
		productID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("persistence: count processing of product %d: %w", productID, err)
	}
	return n, nil
}
