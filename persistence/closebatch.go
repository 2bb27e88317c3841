package persistence

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// MaxCloseParts bounds the parts CloseDuePart splits the due orders into.
const MaxCloseParts = 64

// CloseDueBatch is CloseDuePart(ctx, limit, 0, 1): every due order is in
// the one part.
func (s *Store) CloseDueBatch(ctx context.Context, limit int) ([]Order, error) {
	return s.CloseDuePart(ctx, limit, 0, 1)
}

// CloseDuePart cancels up to limit WAITING_PAY orders of part part of parts
// (the orders whose id MOD parts = part) whose pay deadline has passed on the
// database clock, oldest deadline first, in one transaction with set-based
// statements — one close pass of the sweeper. The parts are disjoint, so
// passes over different parts run at the same time without ever touching one
// order twice:
//
//   - the due orders' ids are read from the (status, pay_deadline) index
//     (whose entries carry the id the part is chosen by), then their rows
//     locked by primary key with SELECT … FOR UPDATE SKIP LOCKED (lockDue):
//     an order a payment or a user cancel holds right now is left for the
//     next pass, so the pass never waits on an order row and never
//     deadlocks with them;
//   - one conditional UPDATE by primary key moves them to CANCELLED (close
//     reason TIMEOUT, version + 1); it must change every locked row;
//   - one multi-row insert writes their RELEASE flows (the unique (RELEASE,
//     orderNo) key: a second release fails the transaction, nothing is given
//     back twice);
//   - one ORDER_STATUS_BATCH outbox row per product carries the CANCELLED
//     status changes (StatusBatchMessage); its delivery makes push update
//     the buyers' pages and the release consumer give each order's Redis
//     reservation back (idempotent per order by its release marker);
//   - last, one UPDATE gives each product's summed quantity back from
//     locked to available (releaseLocked): the stock rows, which every
//     close pass and every lock of those products needs, are held only from
//     that one statement to the commit.
//
// It returns the orders it closed (after the change). A failed transaction
// changes nothing; the caller may fall back to CloseOrder one order at a time
// to isolate a bad row. Errors: limit not in 1…MaxLockBatch, part not in
// 0…parts−1 or parts not in 1…MaxCloseParts, MySQL failed.
func (s *Store) CloseDuePart(ctx context.Context, limit, part, parts int) ([]Order, error) {
	if limit < 1 || limit > MaxLockBatch {
		return nil, fmt.Errorf("persistence: close batch limit %d not in 1…%d", limit, MaxLockBatch)
	}
	if parts < 1 || parts > MaxCloseParts || part < 0 || part >= parts {
		return nil, fmt.Errorf("persistence: close part %d of %d not in 0…%d", part, parts, MaxCloseParts-1)
	}
	var closed []Order
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		var err error
		var now time.Time
		if closed, now, err = lockDue(ctx, tx, limit, part, parts); err != nil || len(closed) == 0 {
			return err
		}
		return cancelDue(ctx, tx, closed, now)
	})
	if err != nil {
		return nil, fmt.Errorf("persistence: close due batch: %w", err)
	}
	return closed, nil
}

// lockDue reads and locks (SKIP LOCKED) up to limit due WAITING_PAY orders of
// the part, oldest deadline first, in two steps: a plain read of the
// candidates' ids from the (status, pay_deadline) index (covering: the index
// carries the id), then a locking read of those rows by primary key that
// keeps the ones still WAITING_PAY and due. Locking through the secondary
// index instead kept its entry of an order a user cancel held (skipped, but
// still locked), which that cancel's own update of the entry then waited for:
// a deadlock, measured in TestClosePathRacesPaymentsAndCancels. The locking
// read is forced onto the primary key (an optimizer working from statistics
// taken before a sale's orders arrived could pick the secondary index) and
// sorted here rather than by the server (no temporary table); it also
// returns the database clock, the moment of the close.
func lockDue(ctx context.Context, tx *sql.Tx, limit, part, parts int) ([]Order, time.Time, error) {
	ids, err := dueIDs(ctx, tx, limit, part, parts)
	if err != nil || len(ids) == 0 {
		return nil, time.Time{}, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+orderCols+`, NOW(3) FROM order_info FORCE INDEX (PRIMARY)
		WHERE id IN (`+marks(len(ids))+`) AND status = 'WAITING_PAY' AND pay_deadline <= NOW(3) FOR UPDATE SKIP LOCKED`, ids...)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("lock due orders: %w", err)
	}
	defer rows.Close()
	due := make([]Order, 0, len(ids))
	var now time.Time
	for rows.Next() {
		o, err := scanOrder(scanWith{rows, &now})
		if err != nil {
			return nil, time.Time{}, err
		}
		due = append(due, o)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("lock due orders: %w", err)
	}
	slices.SortFunc(due, func(a, b Order) int {
		if c := a.PayDeadline.Compare(*b.PayDeadline); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return due, now, nil
}

// scanWith scans a row of orderCols followed by one more column into extra.
type scanWith struct {
	rows  *sql.Rows
	extra any
}

func (s scanWith) Scan(dest ...any) error { return s.rows.Scan(append(dest, s.extra)...) }

// dueIDs reads, without locking, the ids of up to limit due WAITING_PAY
// orders of the part, oldest deadline first.
func dueIDs(ctx context.Context, tx *sql.Tx, limit, part, parts int) ([]any, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id FROM order_info FORCE INDEX (idx_status_deadline)
		WHERE status = 'WAITING_PAY' AND pay_deadline <= NOW(3) AND id MOD ? = ? ORDER BY pay_deadline LIMIT ?`, parts, part, limit)
	if err != nil {
		return nil, fmt.Errorf("read due orders: %w", err)
	}
	defer rows.Close()
	var ids []any
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read due orders: %w", err)
	}
	return ids, nil
}

// cancelDue closes the locked due orders (see CloseDuePart) at now, the
// database clock read with their locks, and updates them in place to their
// state after the change.
func cancelDue(ctx context.Context, tx *sql.Tx, due []Order, now time.Time) error {
	reason := string(order.ReasonTimeout)
	args := []any{now, reason}
	flows := make([]flowRow, 0, len(due))
	for _, o := range due {
		args = append(args, o.ID)
		flows = append(flows, flowRow{order.FlowRelease, o.OrderNo, o.ProductID, o.Quantity, reason})
	}
	res, err := tx.ExecContext(ctx, `UPDATE order_info FORCE INDEX (PRIMARY) SET status = 'CANCELLED', version = version + 1, updated_at = ?, close_reason = ?
		WHERE id IN (`+marks(len(due))+`) AND status = 'WAITING_PAY'`, args...)
	if err != nil {
		return fmt.Errorf("cancel due orders: %w", err)
	}
	if n, _ := res.RowsAffected(); n != int64(len(due)) {
		return fmt.Errorf("%w: %d of %d due orders left WAITING_PAY under their lock", ErrInvalidState, len(due)-int(n), len(due))
	}
	if err := insertFlows(ctx, tx, flows); err != nil {
		return err
	}
	for i := range due {
		o := &due[i]
		o.Status, o.Version, o.UpdatedAt, o.CloseReason = order.Cancelled, o.Version+1, now, reason
	}
	if err := closeEvents(ctx, tx, due, now); err != nil {
		return err
	}
	return releaseLocked(ctx, tx, due, now)
}

// closeEvents writes one ORDER_STATUS_BATCH outbox row per product for the
// closed orders (WAITING_PAY → CANCELLED at now), products in id order.
func closeEvents(ctx context.Context, tx *sql.Tx, closed []Order, now time.Time) error {
	byProduct := map[int64][]order.Event{}
	for _, o := range closed {
		byProduct[o.ProductID] = append(byProduct[o.ProductID], order.Event{OrderNo: o.OrderNo, UserID: o.UserID,
			ProductID: o.ProductID, Quantity: o.Quantity, Amount: o.Amount, From: order.WaitingPay, Status: order.Cancelled,
			Version: o.Version, Reason: o.CloseReason, PayDeadline: o.PayDeadline, OccurredAt: now})
	}
	products := make([]int64, 0, len(byProduct))
	for pid := range byProduct {
		products = append(products, pid)
	}
	slices.Sort(products)
	msgs := make([]OutboxMessage, 0, len(products))
	for _, pid := range products {
		m, err := StatusBatchMessage(byProduct[pid])
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	return appendNewOutbox(ctx, tx, msgs)
}

// releaseLocked gives the closed orders' quantities back from locked to
// available with one conditional UPDATE over their products' stock rows,
// which InnoDB locks in product id order (a fixed order: two passes, or a
// pass and a writer, never wait on each other's stock rows in a cycle). One
// statement, however many products the pass closed orders of: the rows are
// held from it to the commit, not across a round trip per product. It must
// change every row: a product whose locked units do not cover its closes
// fails the pass.
func releaseLocked(ctx context.Context, tx *sql.Tx, closed []Order, now time.Time) error {
	back := map[int64]int64{}
	for _, o := range closed {
		back[o.ProductID] += o.Quantity
	}
	products := slices.Sorted(maps.Keys(back))
	var q string
	var args []any
	if len(products) == 1 {
		pid := products[0]
		q = `UPDATE stock SET locked = locked - ?, available = available + ?, version = version + 1, updated_at = ?
			WHERE product_id = ? AND locked >= ?`
		args = []any{back[pid], back[pid], now, pid, back[pid]}
	} else {
		byProduct, caseArgs := caseByProduct(products, back)
		q = `UPDATE stock SET locked = locked - ` + byProduct + `, available = available + ` + byProduct +
			`, version = version + 1, updated_at = ? WHERE product_id IN (` + marks(len(products)) + `) AND locked >= ` + byProduct
		args = append(append(append(args, caseArgs...), caseArgs...), now)
		args = append(append(args, anys(products)...), caseArgs...)
	}
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("release stock of products %v: %w", products, err)
	}
	if n, _ := res.RowsAffected(); n != int64(len(products)) {
		return fmt.Errorf("release stock of products %v: %d of %d products had the units locked", products, n, len(products))
	}
	return nil
}

// NextDue is how long until the earliest pay deadline of a WAITING_PAY order
// on the database clock (negative when one is due already), and false when
// no order waits for payment: one read of the first entry of the (status,
// pay_deadline) index. The sweeper schedules its next close pass with it.
func (s *Store) NextDue(ctx context.Context) (time.Duration, bool, error) {
	var us sql.NullInt64
	err := s.DB.QueryRowContext(ctx, `SELECT TIMESTAMPDIFF(MICROSECOND, NOW(3), MIN(pay_deadline)) FROM order_info FORCE INDEX (idx_status_deadline)
		WHERE status = 'WAITING_PAY'`).Scan(&us)
	if err != nil {
		return 0, false, fmt.Errorf("persistence: next due order: %w", err)
	}
	return time.Duration(us.Int64) * time.Microsecond, us.Valid, nil
}
