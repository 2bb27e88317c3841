package persistence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// TestPaymentNoReusedForAnotherOrder: a paymentNo that paid one order is
// refused for a second order (ErrPaymentReused), which stays WAITING_PAY with
// its stock locked; a replay for the first order is still a duplicate.
func TestPaymentNoReusedForAnotherOrder(t *testing.T) {
	s := persistencetest.New(t, "lifecycle")
	ctx := context.Background()
	p, nos := fixture(t, s, 10, 2, 1, time.Hour)
	pay := func(no string) (persistence.PayOutcome, error) {
		out, _, err := s.Pay(ctx, persistence.Payment{PaymentNo: "pay-once", OrderNo: no, Amount: 250, PaidAt: time.Now()})
		return out, err
	}
	if out, err := pay(nos[0]); err != nil || out != persistence.PayPaid {
		t.Fatalf("first payment: %v %v", out, err)
	}
	if out, err := pay(nos[1]); !errors.Is(err, persistence.ErrPaymentReused) {
		t.Fatalf("paymentNo reused for another order: outcome %v err %v, want ErrPaymentReused", out, err)
	}
	if persistence.IsRetryable(errors.Join(persistence.ErrPaymentReused)) {
		t.Error("ErrPaymentReused is retryable")
	}
	if o, _ := s.GetOrder(ctx, nos[1]); o.Status != order.WaitingPay {
		t.Fatalf("second order %s, want WAITING_PAY", o.Status)
	}
	if out, err := pay(nos[0]); err != nil || out != persistence.PayDuplicate {
		t.Fatalf("replay for the first order: %v %v, want PayDuplicate", out, err)
	}
	var rows int
	s.DB.QueryRow(`SELECT COUNT(*) FROM payment`).Scan(&rows)
	if st := checkStock(t, s, p.ID); rows != 1 || st.Sold != 1 || st.Locked != 1 {
		t.Fatalf("payments %d, stock %+v; want 1 payment, 1 sold, 1 locked", rows, st)
	}
}
