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
// rolled back and done again the careful way. The careful attempt decides
// nothing from a read another writer's transaction could still change:
//
//   - it reads which of the batch are stored with a locking read (LOCK IN
//     SHARE MODE), which waits for another writer's uncommitted rows of those
//     orderNos and then sees them: stored rows are Duplicates;
//   - a remaining reservation whose (user, product, requestId) belongs to
//     another order — stored under another orderNo, or earlier in this batch
//     — is Renewed (accepted at least lifetime after it: stored with the
//     next request_seq and locked like the others) or Reused (stored FAILED
//     with ReusedRequestPrefix and released), as InsertReservationsWithin
//     decides; the reservation's own orderNo never counts as another order,
//     so a writer that committed it meanwhile cannot make it "reused";
//   - every insert of the attempt must create its row: a duplicate key (a
//     row inserted by another writer after the locking read) stops the
//     transaction with an error that IsRetryable accepts, and the next
//     attempt finds the row stored.
//
// The order_info rows are inserted in orderNo order (stock rows in product
// order), so two writers whose claimed batches overlap wait on each other
// instead of deadlocking. names maps productId → product name for the item
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
	stored, err := storedRequests(ctx, tx, batch, careful)
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
		// The per-user limit (userlimit.go) first: a claim past it makes
		// the batch decide order by order, as one stock does not cover.
		over, err := overLimit(ctx, tx, claims)
		if err != nil {
			return err
		}
		if slices.Contains(over, true) {
			return errBatchStockShort
		}
		ok, err := takeStockAll(ctx, tx, claims)
		if err != nil {
			return err
		}
		if !ok {
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
	n, err := insertItems(ctx, tx, rs, names)
	if err != nil {
		return err
	}
	if n != int64(len(rs)) {
		// The orders were new in this transaction, so must their items be.
		return fmt.Errorf("%w: %d of %d items of new orders already stored", errRacedAgain, int64(len(rs))-n, len(rs))
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
// each of them whose (user, product, requestId) belongs to another order
// (requestOwners, or an earlier reservation of the batch) is renewed (next
// request_seq) or reused (stored FAILED now; msgs holds its status change),
// as sortOut decides for InsertReservationsWithin.
func sortFresh(ctx context.Context, tx *sql.Tx, batch []order.Reservation, stored map[string]string, lifetime time.Duration,
	careful bool, res *LockedInsertResult) (fresh []freshOrder, msgs []OutboxMessage, err error) {
	var owners map[requestKey][]requestOwner
	if careful {
		if owners, err = requestOwners(ctx, tx, batch, stored); err != nil {
			return nil, nil, err
		}
	}
	for _, r := range batch {
		if _, ok := stored[r.OrderNo]; ok {
			res.Duplicates++
			continue
		}
		if !careful {
			fresh = append(fresh, freshOrder{r: r})
			continue
		}
		k := keyOf(r)
		seq, taken, renew := requestTaken(owners[k], r, lifetime)
		switch {
		case !taken:
			fresh = append(fresh, freshOrder{r: r})
		case renew:
			res.Renewed++
			seq++
			fresh = append(fresh, freshOrder{r: r, seq: seq})
		default:
			res.Reused++
			m, err := insertReused(ctx, tx, r)
			if err != nil {
				return nil, nil, err
			}
			msgs = append(msgs, m)
			continue
		}
		// A later reservation of the batch with the same key meets this one.
		owners[k] = append(owners[k], requestOwner{orderNo: r.OrderNo, seq: seq, createdAt: r.AcceptedAt})
	}
	return fresh, msgs, nil
}

// requestKey is an order's (user, product, requestId).
type requestKey struct {
	user, product int64
	request       string
}

func keyOf(r order.Reservation) requestKey { return requestKey{r.UserID, r.ProductID, r.RequestID} }

// requestOwner is an order holding a requestKey: its orderNo, request_seq
// and creation time.
type requestOwner struct {
	orderNo   string
	seq       int64
	createdAt time.Time
}

// requestOwners reads the stored orders of the (user, product, requestId)
// of each reservation of batch not in stored (one statement of point
// lookups on uk_user_product_request per chunk). The read does not lock: an
// order it misses is another writer's uncommitted row, whose key the insert
// then meets (a duplicate key: the attempt stops and is retried).
func requestOwners(ctx context.Context, tx *sql.Tx, batch []order.Reservation, stored map[string]string) (map[requestKey][]requestOwner, error) {
	owners := map[requestKey][]requestOwner{}
	var keys []requestKey
	seen := map[requestKey]bool{}
	for _, r := range batch {
		if _, ok := stored[r.OrderNo]; !ok && !seen[keyOf(r)] {
			seen[keyOf(r)] = true
			keys = append(keys, keyOf(r))
		}
	}
	const perStatement = 200
	for _, chunk := range chunks(len(keys), perStatement) {
		var b strings.Builder
		args := make([]any, 0, 4*(chunk[1]-chunk[0]))
		for i, k := range keys[chunk[0]:chunk[1]] {
			if i > 0 {
				b.WriteString(" UNION ALL ")
			}
			b.WriteString(`SELECT ? AS k, order_no, request_seq, created_at FROM order_info WHERE user_id = ? AND product_id = ? AND request_id = ?`)
			args = append(args, chunk[0]+i, k.user, k.product, k.request)
		}
		if err := ownerRows(ctx, tx, b.String(), args, keys, owners); err != nil {
			return nil, err
		}
	}
	return owners, nil
}

// ownerRows runs one statement of requestOwners and adds its rows to owners.
func ownerRows(ctx context.Context, tx *sql.Tx, query string, args []any, keys []requestKey, owners map[requestKey][]requestOwner) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("read orders of the batch's requestIds: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int
		var o requestOwner
		if err := rows.Scan(&i, &o.orderNo, &o.seq, &o.createdAt); err != nil {
			return err
		}
		if i < 0 || i >= len(keys) {
			return fmt.Errorf("read orders of the batch's requestIds: key index %d out of range", i)
		}
		owners[keys[i]] = append(owners[keys[i]], o)
	}
	return rows.Err()
}

// requestTaken reports whether r's (user, product, requestId) belongs to an
// order of owners other than r's own orderNo, the highest request_seq among
// them, and whether r was accepted at least lifetime after the latest of
// them (a new intent: renew).
func requestTaken(owners []requestOwner, r order.Reservation, lifetime time.Duration) (seq int64, taken, renew bool) {
	var latest time.Time
	for _, o := range owners {
		if o.orderNo == r.OrderNo {
			continue // r itself, stored by another writer since: not another order
		}
		if !taken || o.seq > seq {
			seq = o.seq
		}
		if !taken || o.createdAt.After(latest) {
			latest = o.createdAt
		}
		taken = true
	}
	if !taken {
		return 0, false, false
	}
	return seq, true, !r.AcceptedAt.Before(latest.Add(lifetime - lifetimeSlack))
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
// group[k]'s request_seq) with plain multi-row INSERTs in orderNo order (two
// writers inserting overlapping batches wait on each other's first common
// row instead of each holding a row the other needs): a duplicate key fails
// the statement, and every row must be inserted.
func insertLockedOrders(ctx context.Context, tx *sql.Tx, fresh []freshOrder, group []*Order) error {
	const cols = 13
	byNo := make([]int, len(group))
	for i := range byNo {
		byNo[i] = i
	}
	slices.SortFunc(byNo, func(a, b int) int { return strings.Compare(group[a].OrderNo, group[b].OrderNo) })
	for _, chunk := range chunks(len(byNo), MaxPlaceholders/cols) {
		var b strings.Builder
		args := make([]any, 0, (chunk[1]-chunk[0])*cols)
		b.WriteString(`INSERT INTO order_info (order_no, user_id, request_id, request_seq, product_id, quantity, amount, status,
			version, close_reason, pay_deadline, created_at, updated_at) VALUES `)
		for n, i := range byNo[chunk[0]:chunk[1]] {
			if n > 0 {
				b.WriteByte(',')
			}
			o := group[i]
			b.WriteString("(?,?,?,?,?,?,?,?,?,NULLIF(?, ''),?,?,?)")
			args = append(args, o.OrderNo, o.UserID, o.RequestID, fresh[i].seq, o.ProductID, o.Quantity, o.Amount,
				string(o.Status), o.Version, o.CloseReason, o.PayDeadline, o.CreatedAt, o.UpdatedAt)
		}
		res, err := tx.ExecContext(ctx, b.String(), args...)
		if err != nil {
			return fmt.Errorf("insert locked orders: %w", err)
		}
		if err := mustAffect(res, int64(chunk[1]-chunk[0]), "insert locked orders"); err != nil {
			return err
		}
	}
	return nil
}
