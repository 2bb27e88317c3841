package persistence

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// CloseDueBatch cancels up to limit WAITING_PAY orders whose pay deadline has
// passed on the database clock, oldest deadline first, in one transaction
// with set-based statements — the sweeper's close pass:
//
//   - the due orders are read and locked with one SELECT … FOR UPDATE SKIP
//     LOCKED over the (status, pay_deadline) index: an order a payment or a
//     user cancel holds right now is left for the next pass, so the pass never
//     waits on an order row and never deadlocks with them;
//   - one conditional UPDATE moves them to CANCELLED (close reason TIMEOUT,
//     version + 1);
//   - one multi-row insert writes their RELEASE flows (the unique (RELEASE,
//     orderNo) key: a second release fails the transaction, nothing is given
//     back twice);
//   - one UPDATE per product gives the summed quantity back from locked to
//     available;
//   - one ORDER_STATUS_BATCH outbox row per product carries the CANCELLED
//     status changes (StatusBatchMessage); its delivery makes push update
//     the buyers' pages and the release consumer give each order's Redis
//     reservation back (idempotent per order by its release marker).
//
// It returns the orders it closed (after the change). A failed transaction
// changes nothing; the caller may fall back to CloseOrder one order at a time
// to isolate a bad row.
func (s *Store) CloseDueBatch(ctx context.Context, limit int) ([]Order, error) {
	if limit < 1 || limit > MaxLockBatch {
		return nil, fmt.Errorf("persistence: close batch limit %d not in 1…%d", limit, MaxLockBatch)
	}
	var closed []Order
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		closed = closed[:0]
		rows, err := tx.QueryContext(ctx, `SELECT `+orderCols+` FROM order_info FORCE INDEX (idx_status_deadline)
			WHERE status = 'WAITING_PAY' AND pay_deadline <= NOW(3) ORDER BY pay_deadline LIMIT ? FOR UPDATE SKIP LOCKED`, limit)
		if err != nil {
			return fmt.Errorf("lock due orders: %w", err)
		}
		for rows.Next() {
			o, err := scanOrder(rows)
			if err != nil {
				rows.Close()
				return err
			}
			closed = append(closed, o)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lock due orders: %w", err)
		}
		if len(closed) == 0 {
			return nil
		}
		var now time.Time
		if err := tx.QueryRowContext(ctx, `SELECT NOW(3)`).Scan(&now); err != nil {
			return err
		}
		args := []any{now, string(order.ReasonTimeout)}
		back := map[int64]int64{}
		flows := make([]flowRow, 0, len(closed))
		for _, o := range closed {
			args = append(args, o.OrderNo)
			back[o.ProductID] += o.Quantity
			flows = append(flows, flowRow{order.FlowRelease, o.OrderNo, o.ProductID, o.Quantity, string(order.ReasonTimeout)})
		}
		res, err := tx.ExecContext(ctx, `UPDATE order_info SET status = 'CANCELLED', version = version + 1, updated_at = ?, close_reason = ?
			WHERE order_no IN (`+marks(len(closed))+`) AND status = 'WAITING_PAY'`, args...)
		if err != nil {
			return fmt.Errorf("cancel due orders: %w", err)
		}
		if n, _ := res.RowsAffected(); n != int64(len(closed)) {
			return fmt.Errorf("%w: %d of %d due orders left WAITING_PAY under their lock", ErrInvalidState, len(closed)-int(n), len(closed))
		}
		if err := insertFlows(ctx, tx, flows); err != nil {
			return err
		}
		products := make([]int64, 0, len(back))
		for pid := range back {
			products = append(products, pid)
		}
		slices.Sort(products)
		for _, pid := range products {
			res, err := tx.ExecContext(ctx, `UPDATE stock SET locked = locked - ?, available = available + ?, version = version + 1, updated_at = ?
				WHERE product_id = ? AND locked >= ?`, back[pid], back[pid], now, pid, back[pid])
			if err != nil {
				return fmt.Errorf("release stock of product %d: %w", pid, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return fmt.Errorf("release stock of product %d: locked < %d", pid, back[pid])
			}
		}
		byProduct := map[int64][]order.Event{}
		for i := range closed {
			o := &closed[i]
			o.Status, o.Version, o.UpdatedAt, o.CloseReason = order.Cancelled, o.Version+1, now, string(order.ReasonTimeout)
			byProduct[o.ProductID] = append(byProduct[o.ProductID], order.Event{OrderNo: o.OrderNo, UserID: o.UserID,
				ProductID: o.ProductID, Quantity: o.Quantity, Amount: o.Amount, From: order.WaitingPay, Status: order.Cancelled,
				Version: o.Version, Reason: o.CloseReason, PayDeadline: o.PayDeadline, OccurredAt: now})
		}
		msgs := make([]OutboxMessage, 0, len(products))
		for _, pid := range products {
			m, err := StatusBatchMessage(byProduct[pid])
			if err != nil {
				return err
			}
			msgs = append(msgs, m)
		}
		return appendNewOutbox(ctx, tx, msgs)
	})
	if err != nil {
		return nil, fmt.Errorf("persistence: close due batch: %w", err)
	}
	return closed, nil
}
