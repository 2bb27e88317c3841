package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Refund errors.
var (
	// ErrAlreadyRefunded: the payment was refunded under another refundNo.
	ErrAlreadyRefunded = errors.New("persistence: payment already refunded")
	// ErrNotRefundable: the payment is not REFUND_PENDING (it paid an order
	// that was payable: PAID).
	ErrNotRefundable = errors.New("persistence: payment not refundable")
	// ErrRefundNoReused: the refundNo already refunded another payment.
	ErrRefundNoReused = errors.New("persistence: refundNo already used for another payment")
)

// PendingRefund is a REFUND_PENDING payment in the refund queue.
type PendingRefund struct {
	ID        int64
	PaymentNo string
	OrderNo   string
	UserID    int64 // the order's buyer; 0 if the order row is gone
	Amount    int64 // minor units
	Status    string
	CreatedAt time.Time // when the payment was recorded (UTC)
}

// ListRefunds returns up to limit REFUND_PENDING payments, oldest first
// (created_at, id), starting after cursor (zero: the first page), with the
// cursor of the next page (zero on the last). It walks
// idx_payment_status_created.
func (s *Store) ListRefunds(ctx context.Context, limit int, cursor Cursor) (out []PendingRefund, next Cursor, err error) {
	q := `SELECT p.id, p.payment_no, p.order_no, COALESCE(o.user_id, 0), p.amount, p.status, p.created_at
		FROM payment p FORCE INDEX (idx_payment_status_created) LEFT JOIN order_info o ON o.order_no = p.order_no
		WHERE p.status = ?`
	args := []any{PaymentRefundPending}
	if !cursor.IsZero() {
		q += ` AND (p.created_at > ? OR (p.created_at = ? AND p.id > ?))`
		args = append(args, cursor.At, cursor.At, cursor.ID)
	}
	q += ` ORDER BY p.created_at, p.id LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.DB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, Cursor{}, fmt.Errorf("persistence: list refunds: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r PendingRefund
		if err := rows.Scan(&r.ID, &r.PaymentNo, &r.OrderNo, &r.UserID, &r.Amount, &r.Status, &r.CreatedAt); err != nil {
			return nil, Cursor{}, fmt.Errorf("persistence: list refunds: %w", err)
		}
		r.CreatedAt = r.CreatedAt.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, Cursor{}, fmt.Errorf("persistence: list refunds: %w", err)
	}
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = Cursor{At: last.CreatedAt, ID: last.ID}
	}
	return out, next, nil
}

// RefundBacklog is the refund queue's size: REFUND_PENDING payments and the
// age of the oldest (0 when none), on the database clock.
func (s *Store) RefundBacklog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
	var ageMS sql.NullInt64
	err = s.DB.QueryRowContext(ctx, `SELECT COUNT(*), TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(3)) DIV 1000
		FROM payment FORCE INDEX (idx_payment_status_created) WHERE status = ?`, PaymentRefundPending).Scan(&pending, &ageMS)
	if err != nil {
		return 0, 0, fmt.Errorf("persistence: refund backlog: %w", err)
	}
	return pending, time.Duration(max(ageMS.Int64, 0)) * time.Millisecond, nil
}

// RefundResult is a refunded payment.
type RefundResult struct {
	PaymentNo  string
	OrderNo    string
	Status     string // PaymentRefunded
	RefundNo   string
	RefundedAt time.Time // UTC, database clock
	Applied    bool      // false: this refundNo had refunded the payment before (a replay; nothing changed)
}

// Refund records that the REFUND_PENDING payment paymentNo was refunded under
// refundNo: one conditional update (status REFUND_PENDING → REFUNDED,
// refund_no, refunded_at = NOW(3)). It is idempotent by refundNo: the same
// refundNo again answers the stored refund (Applied false) and changes
// nothing. The unique key on refund_no makes one refundNo refund one payment
// at most; of two concurrent refunds of one payment exactly one updates the
// row.
//
// The refund that changes the row writes its admin_audit entry (adminID,
// ActionRefund, {paymentNo, orderNo, refundNo}) in the same transaction; a
// replay writes none.
//
// Errors: ErrNotFound (no such payment), ErrAlreadyRefunded (refunded under
// another refundNo), ErrNotRefundable (PAID), ErrRefundNoReused (refundNo
// refunded another payment).
func (s *Store) Refund(ctx context.Context, adminID int64, paymentNo, refundNo string) (RefundResult, error) {
	var r RefundResult
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE payment SET status = ?, refund_no = ?, refunded_at = NOW(3)
			WHERE payment_no = ? AND status = ?`, PaymentRefunded, refundNo, paymentNo, PaymentRefundPending)
		if IsDuplicate(err) {
			return ErrRefundNoReused
		}
		if err != nil {
			return err
		}
		applied, _ := res.RowsAffected()
		var rno sql.NullString
		var at sql.NullTime
		err = tx.QueryRowContext(ctx, `SELECT payment_no, order_no, status, refund_no, refunded_at FROM payment WHERE payment_no = ?`,
			paymentNo).Scan(&r.PaymentNo, &r.OrderNo, &r.Status, &rno, &at)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		switch {
		case r.Status == PaymentRefunded && rno.String == refundNo:
			r.RefundNo, r.RefundedAt, r.Applied = rno.String, at.Time.UTC(), applied == 1
		case r.Status == PaymentRefunded:
			return fmt.Errorf("%w (refundNo %s)", ErrAlreadyRefunded, rno.String)
		default: // PAID (a REFUND_PENDING row was updated above, or by a racing refund that then shows as REFUNDED)
			return fmt.Errorf("%w: payment is %s", ErrNotRefundable, r.Status)
		}
		if !r.Applied {
			return nil
		}
		return insertAudit(ctx, tx, adminID, ActionRefund, 0,
			map[string]any{"paymentNo": r.PaymentNo, "orderNo": r.OrderNo, "refundNo": r.RefundNo})
	})
	if errors.Is(err, ErrNotFound) {
		return RefundResult{}, ErrNotFound
	}
	if err != nil {
		return RefundResult{}, fmt.Errorf("persistence: refund %s: %w", paymentNo, err)
	}
	return r, nil
}
