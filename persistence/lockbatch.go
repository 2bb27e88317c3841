package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// MaxLockBatch is the most events one LockStockBatch call takes: its IN lists
// and multi-row inserts stay far below MaxPlaceholders.
const MaxLockBatch = 2000

// LockEvent is one ORDER_CREATED event for LockStockBatch.
type LockEvent struct {
	EventID string
	OrderNo string
}

// LockResult is what LockStockBatch did with one event.
type LockResult struct {
	// Outcome is LockLocked, LockFailed, LockSkipped or LockDuplicate; 0
	// when Err is set.
	Outcome LockOutcome
	// Order is the row after the change (LockLocked, LockFailed) or as
	// found (LockSkipped); zero for LockDuplicate and errors.
	Order Order
	// Err is ErrNotFound when the event's order does not exist: that event
	// was neither applied nor recorded in the consume log.
	Err error
}

// LockStockBatch applies a batch of ORDER_CREATED events for consumer in one
// transaction with set-based statements (SPEC §1 "consumer"), so the cost per
// order falls with the batch size instead of staying at one transaction of
// eight statements:
//
//  1. the batch's orders are locked with one SELECT … FOR UPDATE over an IN
//     list, which InnoDB walks in key order, so two batches never deadlock on
//     each other (and every single-order path also locks the order row before
//     any stock row);
//  2. one read of the consume log finds the events applied before
//     (LockDuplicate); an event seen twice in the batch is applied once and
//     reported LockDuplicate the second time;
//  3. orders no longer PROCESSING (cancelled by the user first) are LockSkipped;
//  4. per product, one conditional UPDATE locks the batch's summed quantity.
//     When MySQL stock cannot cover the sum, the stock row is read FOR UPDATE
//     and the orders are taken in batch order while they fit: exactly the
//     ones that do not fit become FAILED (close reason NO_STOCK, a RELEASE
//     flow of 0 units; their Redis reservation is given back by the release
//     consumer through the FAILED status event), no more, no fewer;
//  5. the pay deadline is the database clock read after every lock was
//     granted, plus payTimeout, so time spent waiting for a lock never
//     shortens a buyer's pay window;
//  6. one UPDATE per target status moves the orders (conditional on
//     PROCESSING, version + 1), then multi-row inserts write the LOCK and
//     RELEASE flows, the consume-log rows of every applied or skipped event,
//     one ORDER_STATUS_BATCH outbox row per product carrying every
//     WAITING_PAY change of the batch (StatusBatchMessage: push is their only
//     reader), and one status-changed row per FAILED order (the release
//     consumer gives each one's Redis reservation back).
//
// No pay-timeout message is written: unpaid orders are closed by the
// sweeper's scan of the (status, pay_deadline) index.
//
// The unique keys still decide: a consume-log row or a flow inserted twice by
// a racing consumer fails the whole transaction with a duplicate-key error,
// and the retry of the batch then finds it applied. A batch-wide error
// (deadlock, lock wait timeout, lost connection) is returned and nothing is
// applied; the caller may split the batch to isolate a failing event.
//
// The returned slice has one result per event, in the order of events.
func (s *Store) LockStockBatch(ctx context.Context, consumer string, events []LockEvent, payTimeout time.Duration) ([]LockResult, error) {
	if len(events) > MaxLockBatch {
		return nil, fmt.Errorf("persistence: lock batch of %d events exceeds %d", len(events), MaxLockBatch)
	}
	results := make([]LockResult, len(events))
	if len(events) == 0 {
		return results, nil
	}
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		clear(results)
		return lockBatch(ctx, tx, consumer, events, payTimeout, results)
	})
	if err != nil {
		return nil, fmt.Errorf("persistence: lock stock batch of %d: %w", len(events), err)
	}
	return results, nil
}

func lockBatch(ctx context.Context, tx *sql.Tx, consumer string, events []LockEvent, payTimeout time.Duration, results []LockResult) error {
	// 1. Lock the orders, in key order.
	nos := make([]string, 0, len(events))
	for _, e := range events {
		nos = append(nos, e.OrderNo)
	}
	slices.Sort(nos)
	nos = slices.Compact(nos)
	orders := make(map[string]*Order, len(nos))
	rows, err := tx.QueryContext(ctx, `SELECT `+orderCols+` FROM order_info WHERE order_no IN (`+marks(len(nos))+`)
		ORDER BY order_no FOR UPDATE`, anys(nos)...)
	if err != nil {
		return fmt.Errorf("lock orders: %w", err)
	}
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			rows.Close()
			return err
		}
		orders[o.OrderNo] = &o
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lock orders: %w", err)
	}

	// 2. Events applied before. READ COMMITTED: this read sees every commit
	// made before the order locks were granted, so a batch that applied one
	// of these events and committed is seen.
	ids := make([]string, 0, len(events))
	for _, e := range events {
		ids = append(ids, e.EventID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	seen, err := consumedBefore(ctx, tx, consumer, ids)
	if err != nil {
		return err
	}

	// 3. Decide per event, in batch order.
	var record []string // consume-log rows to insert
	var toLock []int    // indexes of events whose order is to be locked
	taken := map[string]bool{}
	for i, e := range events {
		o := orders[e.OrderNo]
		switch {
		case seen[e.EventID]:
			results[i].Outcome = LockDuplicate
			continue
		case o == nil:
			results[i].Err = fmt.Errorf("%w: order %s", ErrNotFound, e.OrderNo)
			continue
		}
		seen[e.EventID] = true // a second copy in this batch is a duplicate
		record = append(record, e.EventID)
		if o.Status != order.Processing || taken[e.OrderNo] {
			results[i].Outcome, results[i].Order = LockSkipped, *o
			continue
		}
		taken[e.OrderNo] = true
		toLock = append(toLock, i)
	}
	if len(record) > 0 {
		if err := insertConsumed(ctx, tx, record, consumer); err != nil {
			return err
		}
	}
	if len(toLock) == 0 {
		return nil
	}

	// 4. Stock, one product at a time in id order: the batch's sum, or as
	// many orders as fit.
	want := map[int64]int64{}
	for _, i := range toLock {
		o := orders[events[i].OrderNo]
		want[o.ProductID] += o.Quantity
	}
	products := make([]int64, 0, len(want))
	for pid := range want {
		products = append(products, pid)
	}
	slices.Sort(products)
	fits := map[int64]int64{} // product → units left for the orders, when short
	for _, pid := range products {
		res, err := tx.ExecContext(ctx, `UPDATE stock SET available = available - ?, locked = locked + ?, version = version + 1,
			updated_at = NOW(3) WHERE product_id = ? AND available >= ?`, want[pid], want[pid], pid, want[pid])
		if err != nil {
			return fmt.Errorf("lock stock of product %d: %w", pid, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			continue
		}
		var available int64
		err = tx.QueryRowContext(ctx, `SELECT available FROM stock WHERE product_id = ? FOR UPDATE`, pid).Scan(&available)
		if errors.Is(err, sql.ErrNoRows) {
			available = 0 // no stock row: nothing fits
		} else if err != nil {
			return fmt.Errorf("read stock of product %d: %w", pid, err)
		}
		fits[pid] = available
	}
	var locked, failed []*Order
	short := map[int64]int64{} // product → units locked when short
	for _, i := range toLock {
		o := orders[events[i].OrderNo]
		left, isShort := fits[o.ProductID]
		switch {
		case !isShort:
			locked = append(locked, o)
		case o.Quantity <= left:
			fits[o.ProductID] = left - o.Quantity
			short[o.ProductID] += o.Quantity
			locked = append(locked, o)
		default:
			failed = append(failed, o)
		}
	}
	for _, pid := range products {
		n, ok := short[pid]
		if !ok || n == 0 {
			continue
		}
		res, err := tx.ExecContext(ctx, `UPDATE stock SET available = available - ?, locked = locked + ?, version = version + 1,
			updated_at = NOW(3) WHERE product_id = ? AND available >= ?`, n, n, pid, n)
		if err != nil {
			return fmt.Errorf("lock stock of product %d: %w", pid, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("lock stock of product %d: row changed under its lock", pid)
		}
	}

	// 5. The lock moment, after every wait.
	var now time.Time
	if err := tx.QueryRowContext(ctx, `SELECT NOW(3)`).Scan(&now); err != nil {
		return err
	}
	deadline := now.Add(payTimeout)

	// 6. Transitions, flows, outbox.
	var msgs []OutboxMessage
	var flows []flowRow
	waiting := map[int64][]order.Event{} // product → its WAITING_PAY events, one batch message each
	move := func(group []*Order, to order.Status, reason string, dl *time.Time) error {
		if len(group) == 0 {
			return nil
		}
		args := []any{string(to), now, reason, dl}
		for _, o := range group {
			args = append(args, o.OrderNo)
		}
		res, err := tx.ExecContext(ctx, `UPDATE order_info SET status = ?, version = version + 1, updated_at = ?,
				close_reason = COALESCE(NULLIF(?, ''), close_reason), pay_deadline = COALESCE(?, pay_deadline)
			WHERE order_no IN (`+marks(len(group))+`) AND status = 'PROCESSING'`, args...)
		if err != nil {
			return fmt.Errorf("transition to %s: %w", to, err)
		}
		if n, _ := res.RowsAffected(); n != int64(len(group)) {
			return fmt.Errorf("%w: %d of %d orders left PROCESSING under their lock", ErrInvalidState, len(group)-int(n), len(group))
		}
		for _, o := range group {
			o.Status, o.Version, o.UpdatedAt = to, o.Version+1, now
			if reason != "" {
				o.CloseReason = reason
			}
			if dl != nil {
				d := *dl
				o.PayDeadline = &d
			}
			ev := order.Event{OrderNo: o.OrderNo, UserID: o.UserID, ProductID: o.ProductID, Quantity: o.Quantity,
				Amount: o.Amount, From: order.Processing, Status: to, Version: o.Version, Reason: reason, PayDeadline: o.PayDeadline, OccurredAt: now}
			if to == order.WaitingPay {
				waiting[o.ProductID] = append(waiting[o.ProductID], ev)
				flows = append(flows, flowRow{order.FlowLock, o.OrderNo, o.ProductID, o.Quantity, ""})
				continue
			}
			m, err := StatusMessage(ev)
			if err != nil {
				return err
			}
			msgs = append(msgs, m)
			flows = append(flows, flowRow{order.FlowRelease, o.OrderNo, o.ProductID, 0, "mysql stock short"})
		}
		return nil
	}
	if err := move(locked, order.WaitingPay, "", &deadline); err != nil {
		return err
	}
	if err := move(failed, order.Failed, string(order.ReasonNoStock), nil); err != nil {
		return err
	}
	if err := insertFlows(ctx, tx, flows); err != nil {
		return err
	}
	for _, pid := range products {
		if evs := waiting[pid]; len(evs) > 0 {
			m, err := StatusBatchMessage(evs)
			if err != nil {
				return err
			}
			msgs = append(msgs, m)
		}
	}
	if err := appendNewOutbox(ctx, tx, msgs); err != nil {
		return err
	}
	for _, i := range toLock {
		o := orders[events[i].OrderNo]
		results[i].Order = *o
		results[i].Outcome = LockLocked
		if o.Status == order.Failed {
			results[i].Outcome = LockFailed
		}
	}
	return nil
}

// flowRow is one stock_flow row to insert.
type flowRow struct {
	typ       order.FlowType
	bizNo     string
	productID int64
	qty       int64
	reason    string
}

// insertFlows inserts flows with one statement per chunk. The flows must be
// new: a duplicate (type, bizNo) fails the statement.
func insertFlows(ctx context.Context, tx *sql.Tx, flows []flowRow) error {
	const cols = 5
	for _, chunk := range chunks(len(flows), MaxPlaceholders/cols) {
		var b strings.Builder
		args := make([]any, 0, (chunk[1]-chunk[0])*cols)
		b.WriteString(`INSERT INTO stock_flow (biz_type, biz_no, product_id, quantity, reason) VALUES `)
		for i, f := range flows[chunk[0]:chunk[1]] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("(?,?,?,?,?)")
			args = append(args, string(f.typ), f.bizNo, f.productID, f.qty, f.reason)
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("insert flows: %w", err)
		}
	}
	return nil
}

func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}
