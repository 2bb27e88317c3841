package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// DeadOutboxRow is an outbox row the relay gave up on (status DEAD).
type DeadOutboxRow struct {
	ID         int64     `json:"id"`
	EventID    string    `json:"eventId"`
	EventType  string    `json:"eventType"`
	OrderNo    string    `json:"orderNo"`
	Exchange   string    `json:"exchange"`
	RoutingKey string    `json:"routingKey"`
	RetryCount int       `json:"retryCount"`
	LastError  string    `json:"lastError,omitempty"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// DeadOutbox returns up to limit DEAD outbox rows, oldest first.
func (s *Store) DeadOutbox(ctx context.Context, limit int) ([]DeadOutboxRow, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT id, event_id, event_type, order_no, exchange_name, routing_key,
			retry_count, COALESCE(last_error, ''), updated_at
		FROM mq_outbox WHERE status = 'DEAD' ORDER BY id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("persistence: dead outbox: %w", err)
	}
	defer rows.Close()
	var out []DeadOutboxRow
	for rows.Next() {
		var r DeadOutboxRow
		if err := rows.Scan(&r.ID, &r.EventID, &r.EventType, &r.OrderNo, &r.Exchange, &r.RoutingKey,
			&r.RetryCount, &r.LastError, &r.UpdatedAt); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// OutboxStatuses returns the status of each of eventIDs that has an outbox
// row; absent ids are not in the map.
func (s *Store) OutboxStatuses(ctx context.Context, eventIDs []string) (map[string]string, error) {
	out := make(map[string]string, len(eventIDs))
	for _, c := range chunks(len(eventIDs), 1000) {
		args := make([]any, 0, c[1]-c[0])
		for _, id := range eventIDs[c[0]:c[1]] {
			args = append(args, id)
		}
		rows, err := s.DB.QueryContext(ctx, `SELECT event_id, status FROM mq_outbox WHERE event_id IN (`+marks(len(args))+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("persistence: outbox statuses: %w", err)
		}
		for rows.Next() {
			var id, st string
			if err := rows.Scan(&id, &st); err != nil {
				rows.Close()
				return nil, err
			}
			out[id] = st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReplayOutbox sets the outbox rows of eventIDs that are SENT or DEAD back to
// NEW, due now, with retry_count 0, so the relay publishes them again (the
// consumers still deduplicate them by event id). Rows NEW, RETRY or SENDING
// are on their way already and are left alone. It returns the event ids it
// reset.
func (s *Store) ReplayOutbox(ctx context.Context, eventIDs []string) ([]string, error) {
	var reset []string
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		reset = reset[:0]
		for _, c := range chunks(len(eventIDs), 1000) {
			args := make([]any, 0, c[1]-c[0])
			for _, id := range eventIDs[c[0]:c[1]] {
				args = append(args, id)
			}
			rows, err := tx.QueryContext(ctx, `SELECT event_id FROM mq_outbox
				WHERE event_id IN (`+marks(len(args))+`) AND status IN ('SENT', 'DEAD') FOR UPDATE`, args...)
			if err != nil {
				return err
			}
			var ids []any
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				ids = append(ids, id)
				reset = append(reset, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(ids) == 0 {
				continue
			}
			if _, err := tx.ExecContext(ctx, `UPDATE mq_outbox SET status = 'NEW', retry_count = 0,
					next_retry_at = NOW(3), lease_owner = NULL, last_error = NULL, updated_at = NOW(3)
				WHERE event_id IN (`+marks(len(ids))+`)`, ids...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("persistence: replay outbox: %w", err)
	}
	return reset, nil
}

// ErrNegativeStock is an adjustment that would make MySQL available stock
// negative.
var ErrNegativeStock = errors.New("persistence: adjustment would make available stock negative")

// AdjustResult is the outcome of AdjustStock.
type AdjustResult struct {
	// Applied is false when repairNo had been applied before (with the same
	// delta): nothing changed.
	Applied bool
	// Delta is the delta of the repair's ADJUST flow.
	Delta int64
	// Available is stock.available after the call.
	Available int64
}

// AdjustStock applies a stock repair in one transaction: it writes the
// (ADJUST, repairNo) flow with delta and adds delta to stock.available.
// Applying the same repairNo again with the same delta changes nothing
// (Applied false); with another delta, or for another product, it returns
// ErrConflict. ErrNotFound: no such product; ErrNegativeStock: available would
// go below 0 (nothing written).
func (s *Store) AdjustStock(ctx context.Context, productID int64, repairNo string, delta int64, reason string) (AdjustResult, error) {
	var res AdjustResult
	if len(reason) > 200 {
		reason = reason[:200]
	}
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		res = AdjustResult{Delta: delta}
		var avail int64
		err := tx.QueryRowContext(ctx, `SELECT available FROM stock WHERE product_id = ? FOR UPDATE`, productID).Scan(&avail)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		var pid, qty int64
		err = tx.QueryRowContext(ctx, `SELECT product_id, quantity FROM stock_flow WHERE biz_type = ? AND biz_no = ?`,
			string(order.FlowAdjust), repairNo).Scan(&pid, &qty)
		switch {
		case err == nil:
			if pid != productID || qty != delta {
				return fmt.Errorf("%w: repair %s was applied with delta %d to product %d", ErrConflict, repairNo, qty, pid)
			}
			res.Available = avail
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if avail+delta < 0 {
			return ErrNegativeStock
		}
		inserted, err := insertFlow(ctx, tx, order.FlowAdjust, repairNo, productID, delta, reason)
		if err != nil {
			return err
		}
		if !inserted { // written meanwhile for another product
			return fmt.Errorf("%w: repair %s was applied concurrently", ErrConflict, repairNo)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE stock SET available = available + ?, version = version + 1, updated_at = NOW(3)
			WHERE product_id = ?`, delta, productID); err != nil {
			return err
		}
		res.Applied, res.Available = true, avail+delta
		return nil
	})
	if err != nil {
		return AdjustResult{}, fmt.Errorf("persistence: adjust stock %d by %d (%s): %w", productID, delta, repairNo, err)
	}
	return res, nil
}

// ExistingOrders returns which of orderNos have an order_info row.
func (s *Store) ExistingOrders(ctx context.Context, orderNos []string) (map[string]bool, error) {
	out := make(map[string]bool, len(orderNos))
	for _, c := range chunks(len(orderNos), 1000) {
		args := make([]any, 0, c[1]-c[0])
		for _, no := range orderNos[c[0]:c[1]] {
			args = append(args, no)
		}
		rows, err := s.DB.QueryContext(ctx, `SELECT order_no FROM order_info WHERE order_no IN (`+marks(len(args))+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("persistence: existing orders: %w", err)
		}
		for rows.Next() {
			var no string
			if err := rows.Scan(&no); err != nil {
				rows.Close()
				return nil, err
			}
			out[no] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AdjustFlow is an ADJUST stock flow.
type AdjustFlow struct {
	RepairNo  string
	ProductID int64
	Delta     int64
}

// RecentAdjustFlows returns the ADJUST flows written in the last `within`
// (database clock), oldest first.
func (s *Store) RecentAdjustFlows(ctx context.Context, within time.Duration) ([]AdjustFlow, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT biz_no, product_id, quantity FROM stock_flow
		WHERE biz_type = ? AND created_at >= NOW(3) - INTERVAL ? MICROSECOND ORDER BY id`,
		string(order.FlowAdjust), within.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("persistence: adjust flows: %w", err)
	}
	defer rows.Close()
	var out []AdjustFlow
	for rows.Next() {
		var f AdjustFlow
		if err := rows.Scan(&f.RepairNo, &f.ProductID, &f.Delta); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}
