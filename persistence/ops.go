package persistence

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// OrderBacklog counts orders that should have moved on by now, for metrics
// and alerts.
type OrderBacklog struct {
	// StuckProcessing is the number of PROCESSING orders created longer
	// than stuckAfter ago: the order-lock consumer has not applied their
	// ORDER_CREATED event.
	StuckProcessing int64
	// OldestProcessing is the age of the oldest PROCESSING order (0: none).
	OldestProcessing time.Duration
	// OverdueWaitingPay is the number of WAITING_PAY orders whose pay
	// deadline has passed on the database clock: neither the delayed close
	// message nor the sweeper has closed them yet.
	OverdueWaitingPay int64
}

// OrderBacklog returns the OrderBacklog, with ages on the database clock.
// Both queries use the (status, …) index and read only PROCESSING and
// overdue WAITING_PAY rows.
func (s *Store) OrderBacklog(ctx context.Context, stuckAfter time.Duration) (OrderBacklog, error) {
	var b OrderBacklog
	var oldestMS sql.NullInt64
	err := s.DB.QueryRowContext(ctx, `SELECT
			COALESCE(SUM(created_at <= NOW(3) - INTERVAL ? MICROSECOND), 0),
			TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(3)) DIV 1000
		FROM order_info WHERE status = 'PROCESSING'`, stuckAfter.Microseconds()).Scan(&b.StuckProcessing, &oldestMS)
	if err != nil {
		return b, fmt.Errorf("persistence: processing backlog: %w", err)
	}
	if oldestMS.Int64 > 0 {
		b.OldestProcessing = time.Duration(oldestMS.Int64) * time.Millisecond
	}
	err = s.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_info
		WHERE status = 'WAITING_PAY' AND pay_deadline <= NOW(3)`).Scan(&b.OverdueWaitingPay)
	if err != nil {
		return b, fmt.Errorf("persistence: overdue backlog: %w", err)
	}
	return b, nil
}
