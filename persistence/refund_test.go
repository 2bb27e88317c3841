package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// TestRefundRacesAndConstraints: of many concurrent refunds of one payment
// under different refundNos exactly one applies; the schema refuses a
// refund_no on two payments, an unknown status and a REFUNDED row without
// its refund_no.
func TestRefundRacesAndConstraints(t *testing.T) {
	s := persistencetest.New(t, "lifecycle")
	ctx := context.Background()
	_, nos := fixture(t, s, 10, 3, 1, time.Hour)
	for i, no := range nos {
		if _, err := s.CloseOrder(ctx, persistence.CloseRequest{OrderNo: no, Reason: order.ReasonUser, From: []order.Status{order.WaitingPay}}); err != nil {
			t.Fatal(err)
		}
		if out, _, err := s.Pay(ctx, persistence.Payment{PaymentNo: fmt.Sprintf("late-%d", i), OrderNo: no, Amount: 250, PaidAt: time.Now()}); err != nil || out != persistence.PayRefundPending {
			t.Fatalf("late pay: %v %v", out, err)
		}
	}
	if n, age, err := s.RefundBacklog(ctx); err != nil || n != 3 || age < 0 || age > time.Minute {
		t.Fatalf("backlog %d %v %v", n, age, err)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	applied, refused := 0, 0
	for i := range 10 {
		wg.Go(func() {
			r, err := s.Refund(ctx, 7, "late-0", fmt.Sprintf("RF-%d", i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && r.Applied && r.Status == persistence.PaymentRefunded:
				applied++
			case errors.Is(err, persistence.ErrAlreadyRefunded):
				refused++
			default:
				t.Errorf("refund %d: %+v %v", i, r, err)
			}
		})
	}
	wg.Wait()
	if applied != 1 || refused != 9 {
		t.Fatalf("applied %d, refused %d", applied, refused)
	}
	var rno string
	s.DB.QueryRow(`SELECT refund_no FROM payment WHERE payment_no = 'late-0'`).Scan(&rno)
	again, err := s.Refund(ctx, 7, "late-0", rno)
	if err != nil || again.Applied || again.RefundNo != rno || again.RefundedAt.IsZero() {
		t.Fatalf("replay of the winner: %+v %v", again, err)
	}
	if _, err := s.Refund(ctx, 7, "late-1", rno); !errors.Is(err, persistence.ErrRefundNoReused) {
		t.Fatalf("refundNo of another payment: %v", err)
	}
	if _, err := s.Refund(ctx, 7, "nope", "RF-x"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("unknown payment: %v", err)
	}
	if n, _, _ := s.RefundBacklog(ctx); n != 2 {
		t.Fatalf("backlog %d after one refund", n)
	}
	// The one refund that changed the payment left one audit entry with the
	// admin; the replays and refusals none (issue 26).
	audit, err := s.ListAudit(ctx, 0, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var refunds []persistence.AuditEntry
	for _, e := range audit {
		if e.Action == persistence.ActionRefund {
			refunds = append(refunds, e)
		}
	}
	if len(refunds) != 1 || refunds[0].AdminID != 7 || !strings.Contains(string(refunds[0].Change), `"refundNo":"`+rno+`"`) ||
		!strings.Contains(string(refunds[0].Change), `"paymentNo":"late-0"`) {
		t.Fatalf("refund audit entries: %+v", refunds)
	}
	for what, q := range map[string]string{
		"an unknown status":          `UPDATE payment SET status = 'LOST' WHERE payment_no = 'late-1'`,
		"REFUNDED without refund_no": `UPDATE payment SET status = 'REFUNDED' WHERE payment_no = 'late-1'`,
		"refund_no while pending":    `UPDATE payment SET refund_no = 'x', refunded_at = NOW(3) WHERE payment_no = 'late-1'`,
	} {
		if _, err := s.DB.Exec(q); err == nil {
			t.Errorf("the schema accepted %s", what)
		}
	}
}
