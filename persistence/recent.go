package persistence

import (
	"context"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// OrderRef is what the failover repair (pipeline.RepairLostWrites) reads of
// one order.
type OrderRef struct {
	OrderNo   string
	UserID    int64
	RequestID string
	Quantity  int64
	Status    order.Status
	CreatedAt time.Time // accepted time (UTC)
	UpdatedAt time.Time // last change (UTC)
}

// OrdersSince lists up to limit orders of productID accepted at or after
// since, oldest first.
func (s *Store) OrdersSince(ctx context.Context, productID int64, since time.Time, limit int) ([]OrderRef, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT order_no, user_id, request_id, quantity, status, created_at, updated_at
		FROM order_info WHERE product_id = ? AND created_at >= ? ORDER BY created_at, id LIMIT ?`,
		productID, since.UTC(), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []OrderRef
	for rows.Next() {
		var r OrderRef
		var st string
		if err := rows.Scan(&r.OrderNo, &r.UserID, &r.RequestID, &r.Quantity, &st, &r.CreatedAt, &r.UpdatedAt); err != nil {
			return nil, err
		}
		r.Status = order.Status(st)
		out = append(out, r)
	}
	return out, rows.Err()
}
