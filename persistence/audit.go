package persistence

import (
	"context"
	"fmt"
)

// FlowAudit counts, for one product, orders whose stock flows disagree with
// their status (docs/spec.md §5.4). Every field is 0 in a consistent database.
type FlowAudit struct {
	DuplicateRequests int64 `json:"duplicateRequests"` // (user_id, request_id, request_seq) of the product with more than one order
	MissingLock       int64 `json:"missingLock"`       // WAITING_PAY or PAID orders without a LOCK flow
	MissingConfirm    int64 `json:"missingConfirm"`    // PAID orders without a CONFIRM flow
	MissingRelease    int64 `json:"missingRelease"`    // CANCELLED or FAILED orders without a RELEASE flow
	UnexpectedRelease int64 `json:"unexpectedRelease"` // RELEASE flows of orders that are not CANCELLED or FAILED
	UnexpectedConfirm int64 `json:"unexpectedConfirm"` // CONFIRM flows of orders that are not PAID
	AdjustTotal       int64 `json:"adjustTotal"`       // Σ ADJUST quantity (not a violation: part of the stock equation)
}

// AuditFlows computes FlowAudit for productID.
func (s *Store) AuditFlows(ctx context.Context, productID int64) (FlowAudit, error) {
	var a FlowAudit
	q := []struct {
		dst *int64
		sql string
	}{
		{&a.DuplicateRequests, `SELECT COUNT(*) FROM (SELECT user_id, request_id FROM order_info WHERE product_id = ?
			GROUP BY user_id, request_id, request_seq HAVING COUNT(*) > 1) d`},
		{&a.MissingLock, `SELECT COUNT(*) FROM order_info o LEFT JOIN stock_flow f ON f.biz_type = 'LOCK' AND f.biz_no = o.order_no
			WHERE o.product_id = ? AND o.status IN ('WAITING_PAY', 'PAID') AND f.id IS NULL`},
		{&a.MissingConfirm, `SELECT COUNT(*) FROM order_info o LEFT JOIN stock_flow f ON f.biz_type = 'CONFIRM' AND f.biz_no = o.order_no
			WHERE o.product_id = ? AND o.status = 'PAID' AND f.id IS NULL`},
		{&a.MissingRelease, `SELECT COUNT(*) FROM order_info o LEFT JOIN stock_flow f ON f.biz_type = 'RELEASE' AND f.biz_no = o.order_no
			WHERE o.product_id = ? AND o.status IN ('CANCELLED', 'FAILED') AND f.id IS NULL`},
		{&a.UnexpectedRelease, `SELECT COUNT(*) FROM stock_flow f LEFT JOIN order_info o ON o.order_no = f.biz_no
			WHERE f.product_id = ? AND f.biz_type = 'RELEASE' AND (o.id IS NULL OR o.status NOT IN ('CANCELLED', 'FAILED'))`},
		{&a.UnexpectedConfirm, `SELECT COUNT(*) FROM stock_flow f LEFT JOIN order_info o ON o.order_no = f.biz_no
			WHERE f.product_id = ? AND f.biz_type = 'CONFIRM' AND (o.id IS NULL OR o.status <> 'PAID')`},
		{&a.AdjustTotal, `SELECT COALESCE(SUM(quantity), 0) FROM stock_flow WHERE product_id = ? AND biz_type = 'ADJUST'`},
	}
	for _, x := range q {
		if err := s.DB.QueryRowContext(ctx, x.sql, productID).Scan(x.dst); err != nil {
			return FlowAudit{}, fmt.Errorf("persistence: audit flows of %d: %w", productID, err)
		}
	}
	return a, nil
}
