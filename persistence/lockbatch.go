package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
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
// transaction with set-based statements (docs/spec.md §1 "consumer"), so the cost per
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
	orders, err := lockOrderRows(ctx, tx, events)
	if err != nil {
		return err
	}
	toLock, err := sortLockEvents(ctx, tx, consumer, events, orders, results)
	if err != nil || len(toLock) == 0 {
		return err
	}
	group := make([]*Order, len(toLock))
	claims := make([]stockClaim, len(toLock))
	for k, i := range toLock {
		group[k] = orders[events[i].OrderNo]
		claims[k] = stockClaim{productID: group[k].ProductID, qty: group[k].Quantity, userID: group[k].UserID, orderNo: group[k].OrderNo}
	}
	fit, err := takeStock(ctx, tx, claims)
	if err != nil {
		return err
	}
	now, err := lockMoment(ctx, tx)
	if err != nil {
		return err
	}
	if err := transitionLocked(ctx, tx, group, fit, now, now.Add(payTimeout)); err != nil {
		return err
	}
	for k, i := range toLock {
		results[i].Order = *group[k]
		results[i].Outcome = LockLocked
		if group[k].Status == order.Failed {
			results[i].Outcome = LockFailed
		}
	}
	return nil
}

// lockOrderRows locks the orders of events with one SELECT … FOR UPDATE over
// an IN list, in key order: orderNo → row as found.
func lockOrderRows(ctx context.Context, tx *sql.Tx, events []LockEvent) (map[string]*Order, error) {
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
		return nil, fmt.Errorf("lock orders: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return nil, err
		}
		orders[o.OrderNo] = &o
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lock orders: %w", err)
	}
	return orders, nil
}

// sortLockEvents decides every event in batch order from the consume log and
// the locked rows: applied before (LockDuplicate; READ COMMITTED, so this
// read sees every commit made before the order locks were granted), order
// missing (ErrNotFound), order no longer PROCESSING or already taken by an
// earlier copy in the batch (LockSkipped). It records the consume-log rows
// of every applied or skipped event and returns the indexes of the events
// whose order is to be locked.
func sortLockEvents(ctx context.Context, tx *sql.Tx, consumer string, events []LockEvent, orders map[string]*Order,
	results []LockResult) (toLock []int, err error) {
	ids := make([]string, 0, len(events))
	for _, e := range events {
		ids = append(ids, e.EventID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	seen, err := consumedBefore(ctx, tx, consumer, ids)
	if err != nil {
		return nil, err
	}
	var record []string // consume-log rows to insert
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
			return nil, err
		}
	}
	return toLock, nil
}

// stockClaim is one order's claim on MySQL stock: units of a product, for
// a user (the per-user limit, userlimit.go; userID 0: not checked).
type stockClaim struct {
	productID int64
	qty       int64
	userID    int64
	orderNo   string
}

// takeStock locks MySQL stock for claims, one product at a time in id order
// (so two batches never deadlock on stock rows): one conditional UPDATE per
// product for the claims' summed quantity. When a product's stock cannot
// cover the sum, its row is read FOR UPDATE and the claims are taken in the
// order given while they fit, then their sum is locked with a second
// conditional UPDATE: exactly the claims that do not fit are left out, no
// more, no fewer. fit[k] reports whether claims[k] got its units. Both the
// batch consumer (lockBatch) and the writer's locked insert
// (InsertLockedReservations) take stock here. A claim that would take its
// user past the product's per-user limit does not fit either (overLimit).
func takeStock(ctx context.Context, tx *sql.Tx, claims []stockClaim) (fit []bool, err error) {
	over, err := overLimit(ctx, tx, claims)
	if err != nil {
		return nil, err
	}
	want := map[int64]int64{}
	for k, c := range claims {
		if !over[k] {
			want[c.productID] += c.qty
		}
	}
	products := slices.Sorted(maps.Keys(want))
	left := map[int64]int64{} // product → units available for the claims, when short
	for _, pid := range products {
		ok, err := lockUnits(ctx, tx, pid, want[pid])
		if err != nil {
			return nil, err
		}
		if ok {
			continue
		}
		var available int64
		err = tx.QueryRowContext(ctx, `SELECT available FROM stock WHERE product_id = ? FOR UPDATE`, pid).Scan(&available)
		if errors.Is(err, sql.ErrNoRows) {
			available = 0 // no stock row: nothing fits
		} else if err != nil {
			return nil, fmt.Errorf("read stock of product %d: %w", pid, err)
		}
		left[pid] = available
	}
	fit = make([]bool, len(claims))
	short := map[int64]int64{} // product → units taken when short
	for k, c := range claims {
		units, isShort := left[c.productID]
		switch {
		case over[k]:
		case !isShort:
			fit[k] = true
		case c.qty <= units:
			left[c.productID] = units - c.qty
			short[c.productID] += c.qty
			fit[k] = true
		}
	}
	for _, pid := range products {
		n := short[pid]
		if n == 0 {
			continue
		}
		ok, err := lockUnits(ctx, tx, pid, n)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("lock stock of product %d: row changed under its lock", pid)
		}
	}
	return fit, nil
}

// takeStockAll locks MySQL stock for every claim at once, with one
// conditional UPDATE over the claims' products' stock rows (InnoDB locks
// them in product id order, as takeStock does): ok when every product had
// its summed quantity available. Not ok leaves the products that had it
// changed and the others not — the caller rolls the transaction back (the
// writer's fast attempt, which then decides order by order with takeStock).
// One statement however many products the batch holds: the rows are held
// from it to the commit, not across a round trip per product.
func takeStockAll(ctx context.Context, tx *sql.Tx, claims []stockClaim) (ok bool, err error) {
	want := map[int64]int64{}
	for _, c := range claims {
		want[c.productID] += c.qty
	}
	products := slices.Sorted(maps.Keys(want))
	if len(products) == 1 {
		return lockUnits(ctx, tx, products[0], want[products[0]])
	}
	byProduct, caseArgs := caseByProduct(products, want)
	args := append(append([]any{}, caseArgs...), caseArgs...)
	args = append(append(args, anys(products)...), caseArgs...)
	res, err := tx.ExecContext(ctx, `UPDATE stock SET available = available - `+byProduct+`, locked = locked + `+byProduct+
		`, version = version + 1, updated_at = NOW(3) WHERE product_id IN (`+marks(len(products))+`) AND available >= `+byProduct, args...)
	if err != nil {
		return false, fmt.Errorf("lock stock of products %v: %w", products, err)
	}
	n, _ := res.RowsAffected()
	return n == int64(len(products)), nil
}

// caseByProduct is "CASE product_id WHEN ? THEN ? … END" mapping each of
// products to its units, with the expression's arguments.
func caseByProduct(products []int64, units map[int64]int64) (string, []any) {
	var b strings.Builder
	b.WriteString("CASE product_id")
	args := make([]any, 0, 2*len(products))
	for _, pid := range products {
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, pid, units[pid])
	}
	b.WriteString(" END")
	return b.String(), args
}

// lockUnits moves n units of product pid from available to locked if that
// many are available; ok reports whether it did.
func lockUnits(ctx context.Context, tx *sql.Tx, pid, n int64) (ok bool, err error) {
	res, err := tx.ExecContext(ctx, `UPDATE stock SET available = available - ?, locked = locked + ?, version = version + 1,
		updated_at = NOW(3) WHERE product_id = ? AND available >= ?`, n, n, pid, n)
	if err != nil {
		return false, fmt.Errorf("lock stock of product %d: %w", pid, err)
	}
	affected, _ := res.RowsAffected()
	return affected == 1, nil
}

// lockMoment is the database clock read after every lock of the transaction
// was granted: time spent waiting for a lock never shortens a buyer's pay
// window.
func lockMoment(ctx context.Context, tx *sql.Tx) (time.Time, error) {
	var now time.Time
	if err := tx.QueryRowContext(ctx, `SELECT NOW(3)`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the lock moment: %w", err)
	}
	return now, nil
}

// transitionLocked moves the PROCESSING orders of group to WAITING_PAY
// (fit[k], pay deadline) or FAILED (NO_STOCK) with one conditional UPDATE
// per target status, updates the rows in group to match and writes their
// flows and outbox rows (lockOutcomes).
func transitionLocked(ctx context.Context, tx *sql.Tx, group []*Order, fit []bool, now, deadline time.Time) error {
	var locked, failed []*Order
	for k, o := range group {
		if fit[k] {
			locked = append(locked, o)
		} else {
			failed = append(failed, o)
		}
	}
	if err := moveProcessing(ctx, tx, locked, order.WaitingPay, "", &deadline, now); err != nil {
		return err
	}
	if err := moveProcessing(ctx, tx, failed, order.Failed, string(order.ReasonNoStock), nil, now); err != nil {
		return err
	}
	return lockOutcomes(ctx, tx, group, now)
}

// moveProcessing updates group from PROCESSING to status to (version + 1,
// close reason and pay deadline when given) and the rows in group with it.
func moveProcessing(ctx context.Context, tx *sql.Tx, group []*Order, to order.Status, reason string, dl *time.Time, now time.Time) error {
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
	}
	return nil
}

// lockOutcomes writes what locking the orders of group (now WAITING_PAY or
// FAILED, coming from PROCESSING at now) leaves behind: a LOCK flow per
// WAITING_PAY order and one ORDER_STATUS_BATCH outbox row per product
// carrying its WAITING_PAY changes (StatusBatchMessage: push is their only
// reader); a RELEASE flow of 0 units and a status-changed outbox row per
// FAILED order (the release consumer gives its Redis reservation back,
// once). Multi-row inserts; the flows must be new.
func lockOutcomes(ctx context.Context, tx *sql.Tx, group []*Order, now time.Time) error {
	var msgs []OutboxMessage
	var flows []flowRow
	waiting := map[int64][]order.Event{} // product → its WAITING_PAY events, one batch message each
	for _, o := range group {
		ev := order.Event{OrderNo: o.OrderNo, UserID: o.UserID, ProductID: o.ProductID, Quantity: o.Quantity,
			Amount: o.Amount, From: order.Processing, Status: o.Status, Version: o.Version, Reason: o.CloseReason,
			PayDeadline: o.PayDeadline, OccurredAt: now}
		if o.Status == order.WaitingPay {
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
	if err := insertFlows(ctx, tx, flows); err != nil {
		return err
	}
	for _, pid := range slices.Sorted(maps.Keys(waiting)) {
		m, err := StatusBatchMessage(waiting[pid])
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	return appendNewOutbox(ctx, tx, msgs)
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
