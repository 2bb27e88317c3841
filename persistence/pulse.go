package persistence

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// Readings for the operator console (pipeline.Pulse): cheap, index-only
// counts of a few sales and the lock latencies of the last seconds.

// SaleCounts are one product's order counts: orders per status now, and
// orders that ever reached WAITING_PAY (one LOCK flow each, docs/spec.md §5.4).
type SaleCounts struct {
	ProductID int64
	Orders    map[order.Status]int64
	Locked    int64 // LOCK flows
	Stock     Stock
}

func idList(ids []int64) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return strings.TrimSuffix(strings.Repeat("?,", len(ids)), ","), args
}

// CountSales returns the SaleCounts of productIDs (at most MaxPlaceholders),
// in their order, from three grouped reads over the (product_id, status)
// index of order_info, the (product_id, biz_type) index of stock_flow and the
// stock rows. A product without a stock row has a zero Stock.
func (s *Store) CountSales(ctx context.Context, productIDs []int64) ([]SaleCounts, error) {
	if len(productIDs) == 0 {
		return nil, nil
	}
	if len(productIDs) > MaxPlaceholders {
		return nil, fmt.Errorf("persistence: count sales: %d products, at most %d", len(productIDs), MaxPlaceholders)
	}
	in, args := idList(productIDs)
	out := make([]SaleCounts, len(productIDs))
	at := make(map[int64]int, len(productIDs))
	for i, id := range productIDs {
		out[i] = SaleCounts{ProductID: id, Orders: map[order.Status]int64{}, Stock: Stock{ProductID: id}}
		at[id] = i
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT product_id, status, COUNT(*) FROM order_info
		WHERE product_id IN (`+in+`) GROUP BY product_id, status`, args...)
	if err != nil {
		return nil, fmt.Errorf("persistence: count sales: orders: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, n int64
		var st string
		if err := rows.Scan(&id, &st, &n); err != nil {
			return nil, err
		}
		out[at[id]].Orders[order.Status(st)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	flows, err := s.DB.QueryContext(ctx, `SELECT product_id, COUNT(*) FROM stock_flow
		WHERE product_id IN (`+in+`) AND biz_type = 'LOCK' GROUP BY product_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("persistence: count sales: lock flows: %w", err)
	}
	defer flows.Close()
	for flows.Next() {
		var id, n int64
		if err := flows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[at[id]].Locked = n
	}
	if err := flows.Err(); err != nil {
		return nil, err
	}
	stocks, err := s.DB.QueryContext(ctx, `SELECT product_id, available, locked, sold, version FROM stock WHERE product_id IN (`+in+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("persistence: count sales: stock: %w", err)
	}
	defer stocks.Close()
	for stocks.Next() {
		var st Stock
		if err := stocks.Scan(&st.ProductID, &st.Available, &st.Locked, &st.Sold, &st.Version); err != nil {
			return nil, err
		}
		out[at[st.ProductID]].Stock = st
	}
	if err := stocks.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// LockLatencies returns, for up to limit orders locked (moved to
// WAITING_PAY) at or after since and still WAITING_PAY, the time from the
// gateway's acceptance (created_at) to the lock. The lock time is the pay
// deadline minus payTimeout (the consumer sets pay_deadline = its database
// clock + the pay timeout), so the read is a range of the (status,
// pay_deadline) index. Newest locks first.
func (s *Store) LockLatencies(ctx context.Context, since time.Time, payTimeout time.Duration, limit int) ([]time.Duration, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT TIMESTAMPDIFF(MICROSECOND, created_at, pay_deadline) FROM order_info
		WHERE status = ? AND pay_deadline >= ? ORDER BY pay_deadline DESC LIMIT ?`,
		string(order.WaitingPay), since.Add(payTimeout).UTC(), limit)
	if err != nil {
		return nil, fmt.Errorf("persistence: lock latencies: %w", err)
	}
	defer rows.Close()
	var out []time.Duration
	for rows.Next() {
		var us int64
		if err := rows.Scan(&us); err != nil {
			return nil, err
		}
		out = append(out, max(0, time.Duration(us)*time.Microsecond-payTimeout))
	}
	return out, rows.Err()
}
