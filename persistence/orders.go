package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// Order is a row of order_info. Amount is in minor units.
type Order struct {
	ID          int64
	OrderNo     string
	UserID      int64
	RequestID   string
	ProductID   int64
	Quantity    int64
	Amount      int64
	Status      order.Status
	Version     int64
	CloseReason string
	PayDeadline *time.Time
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// MaxPlaceholders is MySQL's limit of ? per prepared statement.
const MaxPlaceholders = 65535

// ReusedRequestPrefix marks an order whose (user, product, requestId) already
// belonged to another order although the idempotency record in Redis should
// still have answered it (its lifetime had not passed): Redis lost the record
// (a restart without persistence, a failover). Such an order is stored FAILED
// with request_id = prefix + orderNo and its reservation is released, so one
// intent never becomes two orders. requestIds are scoped per (user, product),
// so the same requestId on another product is never such a case.
const ReusedRequestPrefix = "~reused:"

// lifetimeSlack absorbs the rounding of the record's TTL to whole seconds.
const lifetimeSlack = time.Second

// InsertResult counts what InsertReservations did with a batch.
type InsertResult struct {
	Inserted   int // new order rows (Renewed included)
	Duplicates int // reservations already stored (a redelivered stream entry)
	Reused     int // stored FAILED: (user, product, requestId) taken within the record's lifetime
	Renewed    int // stored as a new intent of a requestId whose record had expired (request_seq > 0)
}

// InsertReservations is InsertReservationsWithin with the default lifetime
// of idempotency records, order.DefaultRequestTTL.
func (s *Store) InsertReservations(ctx context.Context, batch []order.Reservation, names map[int64]string) (InsertResult, error) {
	return s.InsertReservationsWithin(ctx, batch, names, order.DefaultRequestTTL)
}

// InsertReservationsWithin writes a batch of reservations in one transaction:
// order_info (PROCESSING), order_item (price snapshot) and one ORDER_CREATED
// outbox row each. It is idempotent: a reservation already stored (same
// orderNo) changes nothing. names maps productId → product name for the item
// snapshot. Statements are split so none exceeds MaxPlaceholders.
//
// A reservation whose (user, product, requestId) belongs to another order is
// a new intent if it was accepted at least lifetime (the gateway's
// RequestTTL: the idempotency record had expired) after the latest such
// order: it is stored as an ordinary order with the next request_seq. Within
// the lifetime it can only come from a lost Redis record; it is stored
// FAILED (REQUEST_REUSED) and released (ReusedRequestPrefix).
func (s *Store) InsertReservationsWithin(ctx context.Context, batch []order.Reservation, names map[int64]string, lifetime time.Duration) (InsertResult, error) {
	var res InsertResult
	if len(batch) == 0 {
		return res, nil
	}
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		res = InsertResult{}
		if err := insertOrders(ctx, tx, batch); err != nil {
			return err
		}
		stored, err := storedRequests(ctx, tx, batch, false)
		if err != nil {
			return err
		}
		fresh, msgs, err := sortOut(ctx, tx, batch, stored, lifetime, &res)
		if err != nil {
			return err
		}
		if _, err := appendOutbox(ctx, tx, msgs); err != nil {
			return err
		}
		if _, err := insertItems(ctx, tx, fresh, names); err != nil {
			return err
		}
		msgs = msgs[:0]
		for _, r := range fresh {
			m, err := CreatedMessage(r)
			if err != nil {
				return err
			}
			msgs = append(msgs, m)
		}
		n, err := appendOutbox(ctx, tx, msgs)
		if err != nil {
			return err
		}
		res.Inserted = int(n)
		res.Duplicates += len(fresh) - res.Inserted
		return nil
	})
	if err != nil {
		return InsertResult{}, fmt.Errorf("persistence: insert reservations: %w", err)
	}
	return res, nil
}

// insertOrders inserts the batch's order_info rows (PROCESSING, version 1);
// a duplicate order_no or (user_id, product_id, request_id, request_seq)
// leaves the row there as it is.
func insertOrders(ctx context.Context, tx *sql.Tx, batch []order.Reservation) error {
	const orderCols = 10
	for _, chunk := range chunks(len(batch), MaxPlaceholders/orderCols) {
		var b strings.Builder
		args := make([]any, 0, (chunk[1]-chunk[0])*orderCols)
		b.WriteString(`INSERT INTO order_info (order_no, user_id, request_id, product_id, quantity, amount, status, version, created_at, updated_at) VALUES `)
		for i, r := range batch[chunk[0]:chunk[1]] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("(?,?,?,?,?,?,?,?,?,?)")
			args = append(args, r.OrderNo, r.UserID, r.RequestID, r.ProductID, r.Quantity, r.Amount(),
				string(order.Processing), 1, r.AcceptedAt, r.AcceptedAt)
		}
		b.WriteString(` ON DUPLICATE KEY UPDATE id = id`)
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("insert orders: %w", err)
		}
	}
	return nil
}

// storedRequests reads back which of the batch are stored under their own
// orderNo, and as whose: orderNo → request_id. lock makes it a locking read
// (LOCK IN SHARE MODE): it waits for another transaction's uncommitted rows
// of those orderNos and sees them once committed, where a plain read under
// READ COMMITTED misses them.
func storedRequests(ctx context.Context, tx *sql.Tx, batch []order.Reservation, lock bool) (map[string]string, error) {
	suffix := ""
	if lock {
		suffix = " LOCK IN SHARE MODE"
	}
	stored := make(map[string]string, len(batch))
	for _, chunk := range chunks(len(batch), MaxPlaceholders) {
		nos := make([]any, 0, chunk[1]-chunk[0])
		for _, r := range batch[chunk[0]:chunk[1]] {
			nos = append(nos, r.OrderNo)
		}
		rows, err := tx.QueryContext(ctx, `SELECT order_no, request_id FROM order_info WHERE order_no IN (`+marks(len(nos))+`)`+suffix, nos...)
		if err != nil {
			return nil, fmt.Errorf("read back orders: %w", err)
		}
		for rows.Next() {
			var no, rid string
			if err := rows.Scan(&no, &rid); err != nil {
				rows.Close()
				return nil, err
			}
			stored[no] = rid
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return stored, nil
}

// sortOut decides each reservation of the batch from what is stored: fresh
// (its own row, to complete with an item and ORDER_CREATED), a duplicate of
// an earlier delivery, renewed (its requestId's record had expired: stored
// now under the next request_seq, fresh too) or reused within the record's
// lifetime (stored FAILED with its release flow; msgs holds its status
// change). It counts them in res.
func sortOut(ctx context.Context, tx *sql.Tx, batch []order.Reservation, stored map[string]string, lifetime time.Duration,
	res *InsertResult) (fresh []order.Reservation, msgs []OutboxMessage, err error) {
	for _, r := range batch {
		if rid, ok := stored[r.OrderNo]; ok {
			if rid == r.RequestID {
				fresh = append(fresh, r)
			} else {
				res.Duplicates++ // stored FAILED as reused by an earlier delivery
			}
			continue
		}
		// (user_id, product_id, request_id) belongs to another order.
		renewed, err := insertRenewed(ctx, tx, r, lifetime)
		if err != nil {
			return nil, nil, err
		}
		if renewed {
			res.Renewed++
			fresh = append(fresh, r)
			continue
		}
		// Within the record's lifetime: Redis lost it. Keep this one
		// visible as FAILED and give its reservation back.
		res.Reused++
		m, err := insertReused(ctx, tx, r)
		if err != nil {
			return nil, nil, err
		}
		msgs = append(msgs, m)
	}
	return fresh, msgs, nil
}

// insertRenewed stores r, whose (user, product, requestId) belongs to
// another order, as an ordinary order under the next request_seq if it was
// accepted at least lifetime after the latest such order (the idempotency
// record had expired: a new intent). renewed is false otherwise (nothing
// written). Orders stored under r's own orderNo are not "another order".
// A duplicate key (another writer stored r or the next request_seq
// meanwhile) stops the transaction with a retryable error.
func insertRenewed(ctx context.Context, tx *sql.Tx, r order.Reservation, lifetime time.Duration) (renewed bool, err error) {
	var seq sql.NullInt64
	var latest sql.NullTime
	if err := tx.QueryRowContext(ctx, `SELECT MAX(request_seq), MAX(created_at) FROM order_info
		WHERE user_id = ? AND product_id = ? AND request_id = ? AND order_no <> ?`, r.UserID, r.ProductID, r.RequestID, r.OrderNo).Scan(&seq, &latest); err != nil {
		return false, fmt.Errorf("read orders of request %s: %w", r.RequestID, err)
	}
	if !latest.Valid || r.AcceptedAt.Before(latest.Time.Add(lifetime-lifetimeSlack)) {
		return false, nil
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO order_info (order_no, user_id, request_id, request_seq, product_id, quantity, amount, status, version, created_at, updated_at)
		VALUES (?,?,?,?,?,?,?,?,?,?,?)`,
		r.OrderNo, r.UserID, r.RequestID, seq.Int64+1, r.ProductID, r.Quantity, r.Amount(), string(order.Processing), 1, r.AcceptedAt, r.AcceptedAt)
	if err != nil {
		return false, raced("insert renewed order", err)
	}
	return true, mustAffect(res, 1, "insert renewed order")
}

// insertReused stores r FAILED (REQUEST_REUSED) under request_id
// ReusedRequestPrefix+orderNo with its RELEASE flow, and returns its status
// change for the outbox (the release consumer gives its units back). Both
// rows must be new: should r's orderNo be stored meanwhile (another writer
// stored the same reservation), the insert fails with a duplicate key and
// the transaction stops with a retryable error — the order that writer
// stored is never given a RELEASE flow or a FAILED event.
func insertReused(ctx context.Context, tx *sql.Tx, r order.Reservation) (OutboxMessage, error) {
	res, err := tx.ExecContext(ctx, `INSERT INTO order_info (order_no, user_id, request_id, product_id, quantity, amount, status, version, close_reason, created_at, updated_at)
		VALUES (?,?,?,?,?,?,?,?,?,?,NOW(3))`,
		r.OrderNo, r.UserID, ReusedRequestPrefix+r.OrderNo, r.ProductID, r.Quantity, r.Amount(),
		string(order.Failed), 1, "REQUEST_REUSED", r.AcceptedAt)
	if err != nil {
		return OutboxMessage{}, raced("insert reused order", err)
	}
	if err := mustAffect(res, 1, "insert reused order"); err != nil {
		return OutboxMessage{}, err
	}
	res, err = tx.ExecContext(ctx, `INSERT INTO stock_flow (biz_type, biz_no, product_id, quantity, reason) VALUES (?,?,?,0,?)`,
		string(order.FlowRelease), r.OrderNo, r.ProductID, "requestId reused")
	if err != nil {
		return OutboxMessage{}, raced("insert reused release flow", err)
	}
	if err := mustAffect(res, 1, "insert reused release flow"); err != nil {
		return OutboxMessage{}, err
	}
	return StatusMessage(order.Event{OrderNo: r.OrderNo, UserID: r.UserID, ProductID: r.ProductID, Quantity: r.Quantity,
		Amount: r.Amount(), From: order.Processing, Status: order.Failed, Version: 1, Reason: "REQUEST_REUSED", OccurredAt: time.Now().UTC()})
}

// raced wraps a failed insert: a duplicate key (a row another writer stored
// after this transaction read) becomes errRacedAgain, which IsRetryable
// accepts; other errors are returned as they are.
func raced(what string, err error) error {
	if IsDuplicate(err) {
		return fmt.Errorf("%s: %w (%v)", what, errRacedAgain, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// mustAffect checks that a statement changed the want rows it meant to
// change; fewer means another transaction got there first, and the
// transaction stops with errRacedAgain (retryable) instead of going on from
// a state it did not create.
func mustAffect(res sql.Result, want int64, what string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: rows affected: %w", what, err)
	}
	if n != want {
		return fmt.Errorf("%s: %w: %d of %d rows changed", what, errRacedAgain, n, want)
	}
	return nil
}

// insertItems inserts the order_item rows (the price and name snapshot) of
// fresh (an item already stored is left as it is); names maps productId →
// product name. It returns the items inserted.
func insertItems(ctx context.Context, tx *sql.Tx, fresh []order.Reservation, names map[int64]string) (int64, error) {
	var total int64
	const itemCols = 6
	for _, chunk := range chunks(len(fresh), MaxPlaceholders/itemCols) {
		var b strings.Builder
		args := make([]any, 0, (chunk[1]-chunk[0])*itemCols)
		b.WriteString(`INSERT INTO order_item (order_no, product_id, product_name, unit_price, quantity, amount) VALUES `)
		for i, r := range fresh[chunk[0]:chunk[1]] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("(?,?,?,?,?,?)")
			args = append(args, r.OrderNo, r.ProductID, names[r.ProductID], r.UnitPrice, r.Quantity, r.Amount())
		}
		b.WriteString(` ON DUPLICATE KEY UPDATE id = id`)
		res, err := tx.ExecContext(ctx, b.String(), args...)
		if err != nil {
			return total, fmt.Errorf("insert items: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}

// chunks splits n items into [lo, hi) ranges of at most size.
func chunks(n, size int) [][2]int {
	var out [][2]int
	for lo := 0; lo < n; lo += size {
		hi := min(lo+size, n)
		out = append(out, [2]int{lo, hi})
	}
	return out
}

func marks(n int) string {
	if n == 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}

const orderCols = `id, order_no, user_id, request_id, product_id, quantity, amount, status, version, COALESCE(close_reason, ''), pay_deadline, created_at, updated_at`

func scanOrder(sc interface{ Scan(...any) error }) (Order, error) {
	var o Order
	var st string
	var dl sql.NullTime
	err := sc.Scan(&o.ID, &o.OrderNo, &o.UserID, &o.RequestID, &o.ProductID, &o.Quantity, &o.Amount, &st, &o.Version,
		&o.CloseReason, &dl, &o.CreatedAt, &o.UpdatedAt)
	if err != nil {
		return Order{}, err
	}
	o.Status = order.Status(st)
	if dl.Valid {
		t := dl.Time
		o.PayDeadline = &t
	}
	return o, nil
}

// GetOrder returns the order or ErrNotFound.
func (s *Store) GetOrder(ctx context.Context, orderNo string) (Order, error) {
	o, err := scanOrder(s.DB.QueryRowContext(ctx, `SELECT `+orderCols+` FROM order_info WHERE order_no = ?`, orderNo))
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("persistence: get order %s: %w", orderNo, err)
	}
	return o, nil
}

// ListOrders returns up to limit of the user's orders, newest first, starting
// after cursor ("" for the first page). next is "" on the last page. Cursors
// are opaque to clients (the row id in decimal).
func (s *Store) ListOrders(ctx context.Context, userID int64, limit int, cursor string) (orders []Order, next string, err error) {
	after := int64(1<<63 - 1)
	if cursor != "" {
		if after, err = strconv.ParseInt(cursor, 10, 64); err != nil || after <= 0 {
			return nil, "", fmt.Errorf("persistence: bad cursor: %w", ErrInvalidState)
		}
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT `+orderCols+` FROM order_info WHERE user_id = ? AND id < ? ORDER BY id DESC LIMIT ?`,
		userID, after, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("persistence: list orders: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return nil, "", err
		}
		orders = append(orders, o)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	if len(orders) > limit {
		orders = orders[:limit]
		next = strconv.FormatInt(orders[limit-1].ID, 10)
	}
	return orders, next, nil
}

// StatusCount is one line of CountOrders.
type StatusCount struct {
	ProductID int64
	Status    order.Status
	Orders    int64
	Units     int64
}

// CountOrders returns, per product and status, the number of orders and the
// units they hold (productID 0 = every product).
func (s *Store) CountOrders(ctx context.Context, productID int64) ([]StatusCount, error) {
	q := `SELECT product_id, status, COUNT(*), COALESCE(SUM(quantity), 0) FROM order_info`
	var args []any
	if productID != 0 {
		q += ` WHERE product_id = ?`
		args = append(args, productID)
	}
	rows, err := s.DB.QueryContext(ctx, q+` GROUP BY product_id, status ORDER BY product_id, status`, args...)
	if err != nil {
		return nil, fmt.Errorf("persistence: count orders: %w", err)
	}
	defer rows.Close()
	var out []StatusCount
	for rows.Next() {
		var c StatusCount
		var st string
		if err := rows.Scan(&c.ProductID, &st, &c.Orders, &c.Units); err != nil {
			return nil, err
		}
		c.Status = order.Status(st)
		out = append(out, c)
	}
	return out, rows.Err()
}

// ExistingOrders returns which of orderNos have an order_info row.
func (s *Store) ExistingOrders(ctx context.Context, orderNos []string) (map[string]bool, error) {
	out, err := s.ordersWhere(ctx, `SELECT order_no FROM order_info WHERE order_no IN (%s)`, orderNos)
	if err != nil {
		return nil, fmt.Errorf("persistence: existing orders: %w", err)
	}
	return out, nil
}

// ReleasedOrders returns which of orderNos MySQL has released: the order is
// CANCELLED or FAILED and has its RELEASE flow. The release consumer gives a
// Redis reservation back only for these, so an event that names an order
// MySQL still holds (WAITING_PAY, PAID) or never stored never frees its
// units in Redis.
func (s *Store) ReleasedOrders(ctx context.Context, orderNos []string) (map[string]bool, error) {
	out, err := s.ordersWhere(ctx, `SELECT o.order_no FROM order_info o
		JOIN stock_flow f ON f.biz_type = 'RELEASE' AND f.biz_no = o.order_no
		WHERE o.order_no IN (%s) AND o.status IN ('CANCELLED', 'FAILED')`, orderNos)
	if err != nil {
		return nil, fmt.Errorf("persistence: released orders: %w", err)
	}
	return out, nil
}

// ordersWhere runs query (one order_no column; %s takes the placeholders of
// an IN list) over orderNos in chunks of 1,000 and returns the orderNos it
// answered.
func (s *Store) ordersWhere(ctx context.Context, query string, orderNos []string) (map[string]bool, error) {
	out := make(map[string]bool, len(orderNos))
	for _, c := range chunks(len(orderNos), 1000) {
		args := make([]any, 0, c[1]-c[0])
		for _, no := range orderNos[c[0]:c[1]] {
			args = append(args, no)
		}
		rows, err := s.DB.QueryContext(ctx, fmt.Sprintf(query, marks(len(args))), args...)
		if err != nil {
			return nil, err
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
