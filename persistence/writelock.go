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

// LockedInsertResult is what InsertLockedReservations did with a batch.
type LockedInsertResult struct {
	InsertResult
	// Locked and Failed count the orders stored WAITING_PAY and FAILED
	// (NO_STOCK) by this call; Reused ones are counted in InsertResult.
	Locked, Failed int
	// Orders are the rows this call stored WAITING_PAY or FAILED, in batch
	// order (for the status cache).
	Orders []Order
}

// errInsertRaced: a row of the batch appeared between the read of what is
// stored and the insert (another writer committed the same entries, or a
// (user, product, requestId) is taken): the transaction is rolled back and
// done again in the careful way.
var errInsertRaced = errors.New("persistence: batch rows inserted meanwhile")

// errBatchStockShort: MySQL stock did not cover a product's sum in the fast
// attempt; the careful one decides order by order.
var errBatchStockShort = errors.New("persistence: mysql stock short for the batch")

// InsertLockedReservations is the writer's half of the "writer" order-lock
// design: one transaction stores a batch of reservations already locked, so
// an order reaches WAITING_PAY in one hop (no ORDER_CREATED message, no
// consume log, no second UPDATE of the order):
//
//  1. one read by orderNo finds the reservations stored before (a reclaimed
//     or redelivered stream entry, a writer killed after its commit and
//     before its XACK): they are Duplicates and change nothing;
//  2. the rest are inserted WAITING_PAY (version 2, as if locked from
//     PROCESSING version 1; pay deadline = the database clock + payTimeout)
//     with plain INSERTs, with their items, their LOCK flows and one
//     ORDER_STATUS_BATCH outbox row per product (push shows PROCESSING →
//     WAITING_PAY from it);
//  3. takeStock, shared with LockStockBatch, takes MySQL stock with one
//     conditional UPDATE per product for the batch's summed quantity, as the
//     transaction's last statements: the product's stock row is locked only
//     from there to the commit, so writers' transactions overlap everywhere
//     else.
//
// When stock is short for a product (MySQL and Redis disagree: rare), the
// transaction is rolled back and done again the careful way, stock first:
// takeStock decides in batch order which orders fit, exactly those that do
// not are stored FAILED (NO_STOCK, a RELEASE flow of 0 units, a
// status-changed outbox row from which the release consumer gives the Redis
// reservation back once), the others WAITING_PAY with the clock read after
// the stock locks.
//
// The unique keys decide a race: if an order_no or (user, product,
// requestId, seq) is taken between step 1 and the insert (two writers
// holding the same pending entries; the loser waits on the winner's row
// locks), the insert fails with a duplicate key, the whole transaction is
// rolled back and done again the careful way, which also sorts out taken
// requestIds: stored rows are Duplicates, and each remaining reservation
// whose (user, product, requestId) belongs to another order is Renewed
// (accepted at least lifetime after it: stored with the next request_seq
// and locked like the others) or Reused (stored FAILED with
// ReusedRequestPrefix and released), as InsertReservationsWithin decides.
// A second race in the careful transaction returns an error that
// IsRetryable accepts. names maps productId → product name for the item
// snapshot.
func (s *Store) InsertLockedReservations(ctx context.Context, batch []order.Reservation, names map[int64]string,
	lifetime, payTimeout time.Duration) (LockedInsertResult, error) {
	var res LockedInsertResult
	if len(batch) == 0 {
		return res, nil
	}
	batch = uniqueOrders(batch)
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		res = LockedInsertResult{}
		return insertLocked(ctx, tx, batch, names, lifetime, payTimeout, false, &res)
	})
	if errors.Is(err, errInsertRaced) || errors.Is(err, errBatchStockShort) {
		err = s.WithTx(ctx, func(tx *sql.Tx) error {
			res = LockedInsertResult{}
			return insertLocked(ctx, tx, batch, names, lifetime, payTimeout, true, &res)
		})
	}
	if err != nil {
		return LockedInsertResult{}, fmt.Errorf("persistence: insert locked reservations: %w", err)
	}
	return res, nil
}

// uniqueOrders drops the later copies of an orderNo from batch.
func uniqueOrders(batch []order.Reservation) []order.Reservation {
	seen := make(map[string]bool, len(batch))
	out := batch[:0:0]
	for _, r := range batch {
		if !seen[r.OrderNo] {
			seen[r.OrderNo] = true
			out = append(out, r)
		}
	}
	return out
}

// freshOrder is a reservation to store locked, with its request_seq.
type freshOrder struct {
	r   order.Reservation
	seq int64
}

// insertLocked is one attempt of InsertLockedReservations; careful sorts out
// the taken (user, product, requestId) keys first.
func insertLocked(ctx context.Context, tx *sql.Tx, batch []order.Reservation, names map[int64]string,
	lifetime, payTimeout time.Duration, careful bool, res *LockedInsertResult) error {
	stored, err := storedRequests(ctx, tx, batch)
	if err != nil {
		return err
	}
	fresh, msgs, err := sortFresh(ctx, tx, batch, stored, lifetime, careful, res)
	if err != nil {
		return err
	}
	if err := appendNewOutbox(ctx, tx, msgs); err != nil {
		return err
	}
	if len(fresh) == 0 {
		return nil
	}
	claims := make([]stockClaim, len(fresh))
	for k, f := range fresh {
		claims[k] = stockClaim{productID: f.r.ProductID, qty: f.r.Quantity, userID: f.r.UserID, orderNo: f.r.OrderNo}
	}
	fit := make([]bool, len(fresh))
	if careful {
		if fit, err = takeStock(ctx, tx, claims); err != nil {
			return err
		}
	} else {
		for k := range fit {
			fit[k] = true // checked by takeStock at the end
		}
	}
	now, err := lockMoment(ctx, tx)
	if err != nil {
		return err
	}
	group := lockedOrders(fresh, fit, now, now.Add(payTimeout))
	if err := storeLocked(ctx, tx, fresh, group, names, now); err != nil {
		if IsDuplicate(err) && !careful {
			return errInsertRaced
		}
		if IsDuplicate(err) {
			return fmt.Errorf("%w (%v)", errRacedAgain, err)
		}
		return err
	}
	if !careful {
		got, err := takeStock(ctx, tx, claims)
		if err != nil {
			return err
		}
		if slices.Contains(got, false) {
			return errBatchStockShort
		}
	}
	res.Inserted += len(group)
	for _, o := range group {
		if o.Status == order.WaitingPay {
			res.Locked++
		} else {
			res.Failed++
		}
		res.Orders = append(res.Orders, *o)
	}
	return nil
}

// storeLocked inserts the rows of group (built from fresh): orders, items,
// flows and outbox rows.
func storeLocked(ctx context.Context, tx *sql.Tx, fresh []freshOrder, group []*Order, names map[int64]string, now time.Time) error {
	if err := insertLockedOrders(ctx, tx, fresh, group); err != nil {
		return err
	}
	rs := make([]order.Reservation, len(fresh))
	for k, f := range fresh {
		rs[k] = f.r
	}
	if err := insertItems(ctx, tx, rs, names); err != nil {
		return err
	}
	return lockOutcomes(ctx, tx, group, now)
}

// errRacedAgain is a duplicate key in the careful attempt: another writer
// committed some of the batch meanwhile. Retryable: the next attempt finds
// those rows stored.
var errRacedAgain = retryableError("persistence: batch rows inserted by another writer meanwhile")

// retryableError is an error IsRetryable accepts (not a MySQL error, not one
// of the package's permanent ones).
type retryableError string

func (e retryableError) Error() string { return string(e) }

// sortFresh returns the reservations of batch to store locked: those not
// stored under their orderNo (stored; a stored one is a Duplicate). careful:
// each of them whose (user, product, requestId) belongs to another order is
// renewed (next request_seq) or reused (stored FAILED now; msgs holds its
// status change), as sortOut decides for InsertReservationsWithin.
func sortFresh(ctx context.Context, tx *sql.Tx, batch []order.Reservation, stored map[string]string, lifetime time.Duration,
	careful bool, res *LockedInsertResult) (fresh []freshOrder, msgs []OutboxMessage, err error) {
	for _, r := range batch {
		if _, ok := stored[r.OrderNo]; ok {
			res.Duplicates++
			continue
		}
		if !careful {
			fresh = append(fresh, freshOrder{r: r})
			continue
		}
		seq, taken, renew, err := requestTaken(ctx, tx, r, lifetime)
		switch {
		case err != nil:
			return nil, nil, err
		case !taken:
			fresh = append(fresh, freshOrder{r: r})
		case renew:
			res.Renewed++
			fresh = append(fresh, freshOrder{r: r, seq: seq + 1})
		default:
			res.Reused++
			m, err := insertReused(ctx, tx, r)
			if err != nil {
				return nil, nil, err
			}
			msgs = append(msgs, m)
		}
	}
	return fresh, msgs, nil
}

// requestTaken reports whether r's (user, product, requestId) belongs to
// another order, its highest request_seq, and whether r was accepted at
// least lifetime after the latest such order (a new intent: renew).
func requestTaken(ctx context.Context, tx *sql.Tx, r order.Reservation, lifetime time.Duration) (seq int64, taken, renew bool, err error) {
	var s sql.NullInt64
	var latest sql.NullTime
	if err := tx.QueryRowContext(ctx, `SELECT MAX(request_seq), MAX(created_at) FROM order_info
		WHERE user_id = ? AND product_id = ? AND request_id = ?`, r.UserID, r.ProductID, r.RequestID).Scan(&s, &latest); err != nil {
		return 0, false, false, fmt.Errorf("read orders of request %s: %w", r.RequestID, err)
	}
	if !latest.Valid {
		return 0, false, false, nil
	}
	return s.Int64, true, !r.AcceptedAt.Before(latest.Time.Add(lifetime - lifetimeSlack)), nil
}

// lockedOrders builds the rows of fresh as locked at now: WAITING_PAY with
// deadline where fit, FAILED (NO_STOCK) elsewhere; version 2.
func lockedOrders(fresh []freshOrder, fit []bool, now, deadline time.Time) []*Order {
	group := make([]*Order, len(fresh))
	for k, f := range fresh {
		o := &Order{OrderNo: f.r.OrderNo, UserID: f.r.UserID, RequestID: f.r.RequestID, ProductID: f.r.ProductID,
			Quantity: f.r.Quantity, Amount: f.r.Amount(), Status: order.WaitingPay, Version: 2,
			CreatedAt: f.r.AcceptedAt, UpdatedAt: now}
		if fit[k] {
			d := deadline
			o.PayDeadline = &d
		} else {
			o.Status, o.CloseReason = order.Failed, string(order.ReasonNoStock)
		}
		group[k] = o
	}
	return group
}

// insertLockedOrders inserts the order_info rows of group (fresh[k] gives
// group[k]'s request_seq) with plain multi-row INSERTs: a duplicate key
// fails the statement.
func insertLockedOrders(ctx context.Context, tx *sql.Tx, fresh []freshOrder, group []*Order) error {
	const cols = 13
	for _, chunk := range chunks(len(group), MaxPlaceholders/cols) {
		var b strings.Builder
		args := make([]any, 0, (chunk[1]-chunk[0])*cols)
		b.WriteString(`INSERT INTO order_info (order_no, user_id, request_id, request_seq, product_id, quantity, amount, status,
			version, close_reason, pay_deadline, created_at, updated_at) VALUES `)
		for i := chunk[0]; i < chunk[1]; i++ {
			if i > chunk[0] {
				b.WriteByte(',')
			}
			o := group[i]
			b.WriteString("(?,?,?,?,?,?,?,?,?,NULLIF(?, ''),?,?,?)")
			args = append(args, o.OrderNo, o.UserID, o.RequestID, fresh[i].seq, o.ProductID, o.Quantity, o.Amount,
				string(o.Status), o.Version, o.CloseReason, o.PayDeadline, o.CreatedAt, o.UpdatedAt)
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("insert locked orders: %w", err)
		}
	}
	return nil
}
