package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// ErrNotDue is returned by CloseOrder when a timeout close arrives before the
// order's pay deadline on the database clock.
var ErrNotDue = errors.New("persistence: pay deadline not reached")

var errStockShort = errors.New("stock short")

// LockOutcome says what LockStock did.
type LockOutcome int

// LockStock outcomes.
const (
	LockLocked    LockOutcome = iota + 1 // PROCESSING → WAITING_PAY, stock locked, LOCK flow written
	LockFailed                           // PROCESSING → FAILED: MySQL stock was short; the Redis reservation must be released
	LockSkipped                          // the order had left PROCESSING (cancelled by the user): nothing locked
	LockDuplicate                        // the consume log had the event: applied before, nothing changed
)

func (o LockOutcome) String() string {
	switch o {
	case LockLocked:
		return "locked"
	case LockFailed:
		return "failed"
	case LockSkipped:
		return "skipped"
	case LockDuplicate:
		return "duplicate"
	}
	return "unknown"
}

// lockedOrder reads the order row FOR UPDATE together with the database
// clock at the moment the lock was granted: SYSDATE(3) is evaluated when the
// row is returned, after any lock wait, where NOW(3) is the statement's start
// (a buyer whose order waited 25 s for its row lock got a pay window 25 s
// short with NOW).
func lockedOrder(ctx context.Context, tx *sql.Tx, orderNo string) (Order, time.Time, error) {
	var now time.Time
	var o Order
	var st string
	var dl sql.NullTime
	err := tx.QueryRowContext(ctx, `SELECT `+orderCols+`, SYSDATE(3) FROM order_info WHERE order_no = ? FOR UPDATE`, orderNo).
		Scan(&o.ID, &o.OrderNo, &o.UserID, &o.RequestID, &o.ProductID, &o.Quantity, &o.Amount, &st, &o.Version,
			&o.CloseReason, &dl, &o.CreatedAt, &o.UpdatedAt, &now)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, now, ErrNotFound
	}
	if err != nil {
		return Order{}, now, err
	}
	o.Status = order.Status(st)
	if dl.Valid {
		t := dl.Time
		o.PayDeadline = &t
	}
	return o, now, nil
}

// transition moves o from its current status to `to` with a conditional
// update, bumps the version and appends the status-changed outbox row. It
// updates o in place.
func transition(ctx context.Context, tx *sql.Tx, o *Order, to order.Status, now time.Time, reason string, deadline *time.Time) error {
	if !order.CanTransition(o.Status, to) {
		return fmt.Errorf("%w: %s → %s", ErrInvalidState, o.Status, to)
	}
	res, err := tx.ExecContext(ctx, `UPDATE order_info SET status = ?, version = version + 1, updated_at = ?,
			close_reason = COALESCE(NULLIF(?, ''), close_reason), pay_deadline = COALESCE(?, pay_deadline)
		WHERE order_no = ? AND status = ?`,
		string(to), now, reason, deadline, o.OrderNo, string(o.Status))
	if err != nil {
		return fmt.Errorf("transition %s: %w", o.OrderNo, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: %s is no longer %s", ErrInvalidState, o.OrderNo, o.Status)
	}
	from := o.Status
	o.Status, o.Version, o.UpdatedAt = to, o.Version+1, now
	if reason != "" {
		o.CloseReason = reason
	}
	if deadline != nil {
		o.PayDeadline = deadline
	}
	m, err := StatusMessage(order.Event{OrderNo: o.OrderNo, UserID: o.UserID, ProductID: o.ProductID, Quantity: o.Quantity,
		Amount: o.Amount, From: from, Status: to, Version: o.Version, Reason: reason, PayDeadline: o.PayDeadline, OccurredAt: now})
	if err != nil {
		return err
	}
	return appendNewOutbox(ctx, tx, []OutboxMessage{m})
}

func insertFlow(ctx context.Context, tx *sql.Tx, t order.FlowType, bizNo string, productID, qty int64, reason string) (bool, error) {
	_, err := tx.ExecContext(ctx, `INSERT INTO stock_flow (biz_type, biz_no, product_id, quantity, reason) VALUES (?, ?, ?, ?, ?)`,
		string(t), bizNo, productID, qty, reason)
	if IsDuplicate(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("insert %s flow %s: %w", t, bizNo, err)
	}
	return true, nil
}

// LockStock applies an ORDER_CREATED event for consumer: in one transaction it
// records the event in the consume log, moves the order PROCESSING →
// WAITING_PAY with pay_deadline = database now + payTimeout, writes the LOCK
// flow, appends the status-changed and the delayed pay-timeout outbox rows and
// locks the stock with UPDATE … WHERE available >= quantity (last, so the hot
// stock row is held only until commit). If MySQL stock is short it instead
// moves the order to FAILED with a RELEASE flow of 0 units (nothing was locked
// in MySQL; the Redis reservation is given back by the release consumer).
func (s *Store) LockStock(ctx context.Context, eventID, orderNo, consumer string, payTimeout time.Duration) (LockOutcome, Order, error) {
	var out LockOutcome
	var o Order
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		first, err := RecordConsumed(ctx, tx, eventID, consumer)
		if err != nil || !first {
			out = LockDuplicate
			return err
		}
		var now time.Time
		if o, now, err = lockedOrder(ctx, tx, orderNo); err != nil {
			return err
		}
		if o.Status != order.Processing {
			out = LockSkipped
			return nil
		}
		over, err := overLimit(ctx, tx, []stockClaim{{productID: o.ProductID, qty: o.Quantity, userID: o.UserID, orderNo: o.OrderNo}})
		if err != nil {
			return err
		}
		if over[0] { // past the per-user limit (userlimit.go): failed as an order that does not fit
			return errStockShort
		}
		deadline := now.Add(payTimeout)
		if err := transition(ctx, tx, &o, order.WaitingPay, now, "", &deadline); err != nil {
			return err
		}
		if _, err := insertFlow(ctx, tx, order.FlowLock, o.OrderNo, o.ProductID, o.Quantity, ""); err != nil {
			return err
		}
		m, err := PayTimeoutMessage(o, deadline, now, payTimeout)
		if err != nil {
			return err
		}
		if err := appendNewOutbox(ctx, tx, []OutboxMessage{m}); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE stock SET available = available - ?, locked = locked + ?, version = version + 1, updated_at = ?
			WHERE product_id = ? AND available >= ?`, o.Quantity, o.Quantity, now, o.ProductID, o.Quantity)
		if err != nil {
			return fmt.Errorf("lock stock: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return errStockShort
		}
		out = LockLocked
		return nil
	})
	if errors.Is(err, errStockShort) {
		return s.failOrder(ctx, eventID, orderNo, consumer)
	}
	if err != nil {
		return 0, Order{}, fmt.Errorf("persistence: lock stock %s: %w", orderNo, err)
	}
	return out, o, nil
}

func (s *Store) failOrder(ctx context.Context, eventID, orderNo, consumer string) (LockOutcome, Order, error) {
	var out LockOutcome
	var o Order
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		first, err := RecordConsumed(ctx, tx, eventID, consumer)
		if err != nil || !first {
			out = LockDuplicate
			return err
		}
		var now time.Time
		if o, now, err = lockedOrder(ctx, tx, orderNo); err != nil {
			return err
		}
		if o.Status != order.Processing {
			out = LockSkipped
			return nil
		}
		if err := transition(ctx, tx, &o, order.Failed, now, string(order.ReasonNoStock), nil); err != nil {
			return err
		}
		if _, err := insertFlow(ctx, tx, order.FlowRelease, o.OrderNo, o.ProductID, 0, "mysql stock short"); err != nil {
			return err
		}
		out = LockFailed
		return nil
	})
	if err != nil {
		return 0, Order{}, fmt.Errorf("persistence: fail order %s: %w", orderNo, err)
	}
	return out, o, nil
}

// CloseRequest asks CloseOrder to cancel an order.
type CloseRequest struct {
	OrderNo string
	UserID  int64 // > 0: only this user's order (else ErrNotFound)
	Reason  order.CloseReason
	From    []order.Status // statuses the close may start from
	// Due requires pay_deadline <= NOW(3) on the database clock (timeout closes).
	Due bool
}

// CloseOrder moves an order to CANCELLED: the conditional update decides the one
// caller that closes it, and the RELEASE flow insert decides whether stock is
// given back (in MySQL only if the order was WAITING_PAY, i.e. locked). It
// appends the status-changed row, whose delivery makes the release consumer
// give the Redis reservation back. Every path that cancels (user cancel, the
// delayed close message, the sweeper) goes through here.
//
// Errors: ErrNotFound (no such order, or another user's), ErrInvalidState
// (status not in From; the returned Order is the current row), ErrNotDue.
func (s *Store) CloseOrder(ctx context.Context, req CloseRequest) (Order, error) {
	var o Order
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		var now time.Time
		var err error
		if o, now, err = lockedOrder(ctx, tx, req.OrderNo); err != nil {
			return err
		}
		if req.UserID > 0 && o.UserID != req.UserID {
			o = Order{}
			return ErrNotFound
		}
		if !slices.Contains(req.From, o.Status) {
			return fmt.Errorf("%w: order is %s", ErrInvalidState, o.Status)
		}
		if req.Due && (o.PayDeadline == nil || o.PayDeadline.After(now)) {
			return ErrNotDue
		}
		from := o.Status
		if err := transition(ctx, tx, &o, order.Cancelled, now, string(req.Reason), nil); err != nil {
			return err
		}
		var back int64
		if from == order.WaitingPay {
			back = o.Quantity
		}
		first, err := insertFlow(ctx, tx, order.FlowRelease, o.OrderNo, o.ProductID, back, string(req.Reason))
		if err != nil {
			return err
		}
		if !first || back == 0 {
			return nil
		}
		res, err := tx.ExecContext(ctx, `UPDATE stock SET locked = locked - ?, available = available + ?, version = version + 1, updated_at = ?
			WHERE product_id = ? AND locked >= ?`, back, back, now, o.ProductID, back)
		if err != nil {
			return fmt.Errorf("release stock: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("release stock of %s: locked < %d", o.OrderNo, back)
		}
		return nil
	})
	if err != nil {
		return o, fmt.Errorf("persistence: close %s: %w", req.OrderNo, err)
	}
	return o, nil
}

// Payment statuses (payment.status; the CHECK chk_payment_status of
// 0008_refunds.sql enumerates them too).
const (
	PaymentPaid          = "PAID"
	PaymentRefundPending = "REFUND_PENDING" // money taken for an order that is not (or no longer) payable
	PaymentRefunded      = "REFUNDED"       // a REFUND_PENDING payment an operator refunded (Store.Refund)
)

// Payment is a payment callback.
type Payment struct {
	PaymentNo string
	OrderNo   string
	Amount    int64 // minor units
	PaidAt    time.Time
}

// PayOutcome says what Pay did.
type PayOutcome int

// Pay outcomes.
const (
	PayPaid          PayOutcome = iota + 1 // WAITING_PAY → PAID, CONFIRM flow, locked → sold
	PayDuplicate                           // paymentNo recorded before: nothing changed
	PayRefundPending                       // order already CANCELLED, FAILED or PAID: payment recorded as REFUND_PENDING
)

// Pay applies a payment callback in one transaction. The order row is locked
// first, so concurrent callbacks and closes serialise on it; the unique
// payment_no makes duplicates no-ops.
//
// Errors: ErrNotFound (no order), ErrAmount (amount differs from the order's;
// nothing recorded), ErrInvalidState (order still PROCESSING; retry later),
// ErrPaymentReused (paymentNo already recorded for another order).
func (s *Store) Pay(ctx context.Context, p Payment) (PayOutcome, Order, error) {
	var out PayOutcome
	var o Order
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		var now time.Time
		var err error
		if o, now, err = lockedOrder(ctx, tx, p.OrderNo); err != nil {
			return err
		}
		if p.Amount != o.Amount {
			return ErrAmount
		}
		if o.Status == order.Processing {
			return fmt.Errorf("%w: order is PROCESSING", ErrInvalidState)
		}
		status := PaymentRefundPending
		if o.Status == order.WaitingPay {
			status = PaymentPaid
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO payment (payment_no, order_no, amount, status, paid_at) VALUES (?, ?, ?, ?, ?)`,
			p.PaymentNo, p.OrderNo, p.Amount, status, p.PaidAt.UTC())
		if IsDuplicate(err) {
			var owner string
			if err := tx.QueryRowContext(ctx, `SELECT order_no FROM payment WHERE payment_no = ?`, p.PaymentNo).Scan(&owner); err != nil {
				return fmt.Errorf("read payment: %w", err)
			}
			if owner != p.OrderNo { // a replay must be of the same payment, not a paymentNo reused for another order
				return fmt.Errorf("%w: paymentNo %s paid order %s", ErrPaymentReused, p.PaymentNo, owner)
			}
			out = PayDuplicate
			return nil
		}
		if err != nil {
			return fmt.Errorf("insert payment: %w", err)
		}
		if status == PaymentRefundPending {
			out = PayRefundPending
			return nil
		}
		if err := transition(ctx, tx, &o, order.Paid, now, "", nil); err != nil {
			return err
		}
		if first, err := insertFlow(ctx, tx, order.FlowConfirm, o.OrderNo, o.ProductID, o.Quantity, ""); err != nil || !first {
			if err == nil {
				err = fmt.Errorf("%w: CONFIRM flow of %s exists", ErrConflict, o.OrderNo)
			}
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE stock SET locked = locked - ?, sold = sold + ?, version = version + 1, updated_at = ?
			WHERE product_id = ? AND locked >= ?`, o.Quantity, o.Quantity, now, o.ProductID, o.Quantity)
		if err != nil {
			return fmt.Errorf("confirm stock: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("confirm stock of %s: locked < %d", o.OrderNo, o.Quantity)
		}
		out = PayPaid
		return nil
	})
	if err != nil {
		return 0, o, fmt.Errorf("persistence: pay %s: %w", p.OrderNo, err)
	}
	return out, o, nil
}

// DueOrders returns up to limit orderNos in WAITING_PAY whose pay deadline
// has passed on the database clock, oldest deadline first.
func (s *Store) DueOrders(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT order_no FROM order_info WHERE status = 'WAITING_PAY' AND pay_deadline <= NOW(3)
		ORDER BY pay_deadline LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("persistence: due orders: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var no string
		if err := rows.Scan(&no); err != nil {
			return nil, err
		}
		out = append(out, no)
	}
	return out, rows.Err()
}
