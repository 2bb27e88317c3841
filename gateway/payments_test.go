package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

func TestCancelOrder(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))
	tok := token(t, 1)

	// Accepted but not yet in MySQL: 409, retry later.
	pending := e.accepted(1, pid, 1, "pending")
	msg := e.do("POST", "/api/orders/"+pending+"/cancel", tok, nil).wantError(t, 409, CodeInvalidState)
	if !strings.Contains(msg, "still being recorded") {
		t.Fatalf("pending cancel message %q", msg)
	}
	e.do("POST", "/api/orders/"+pending+"/cancel", token(t, 2), nil).wantError(t, 404, CodeNotFound)

	// PROCESSING in MySQL (not yet locked) and WAITING_PAY both cancel.
	e.record(pending)
	r := e.do("POST", "/api/orders/"+pending+"/cancel", tok, nil)
	if r.status != 200 || r.json(t)["status"] != "CANCELLED" || r.json(t)["orderNo"] != pending {
		t.Fatalf("cancel PROCESSING: %s", r)
	}
	no := e.waitingPay(1, pid, 2, "waiting")
	e.do("POST", "/api/orders/"+no+"/cancel", token(t, 2), nil).wantError(t, 404, CodeNotFound)
	r = e.do("POST", "/api/orders/"+no+"/cancel", tok, nil)
	if r.status != 200 || r.json(t)["status"] != "CANCELLED" {
		t.Fatalf("cancel WAITING_PAY: %s", r)
	}
	if e.orderStatus(no) != order.Cancelled {
		t.Fatal("not cancelled in MySQL")
	}
	// Twice: 409; unknown and malformed: 404.
	msg = e.do("POST", "/api/orders/"+no+"/cancel", tok, nil).wantError(t, 409, CodeInvalidState)
	if !strings.Contains(msg, "CANCELLED") {
		t.Fatalf("message %q", msg)
	}
	e.do("POST", "/api/orders/"+no[:len(no)-1]+"8/cancel", tok, nil).wantError(t, 404, CodeNotFound)
	e.do("POST", "/api/orders/xyz/cancel", tok, nil).wantError(t, 404, CodeNotFound)
	// The gateway does not release: Redis keeps the reservation until the
	// release consumer handles the status event.
	if a := e.available(pid, 0); a != 7 {
		t.Fatalf("available %d, want 7", a)
	}
}

func TestDemoPay(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))
	tok := token(t, 1)
	no := e.waitingPay(1, pid, 2, "pay-me")

	e.do("POST", "/api/orders/"+no+"/pay", token(t, 2), nil).wantError(t, 404, CodeNotFound)
	r := e.do("POST", "/api/orders/"+no+"/pay", tok, nil)
	if r.status != 200 || r.json(t)["status"] != "PAID" || r.json(t)["orderNo"] != no {
		t.Fatalf("pay: %s", r)
	}
	e.do("POST", "/api/orders/"+no+"/pay", tok, nil).wantError(t, 409, CodeInvalidState)
	var payments int
	e.store.DB.QueryRow(`SELECT COUNT(*) FROM payment WHERE order_no = ? AND payment_no = ? AND status = 'PAID'`, no, "demo-"+no).Scan(&payments)
	if payments != 1 {
		t.Fatalf("%d demo payments", payments)
	}

	// Not yet stored, cancelled, unknown.
	pending := e.accepted(1, pid, 1, "pending")
	e.do("POST", "/api/orders/"+pending+"/pay", tok, nil).wantError(t, 409, CodeInvalidState)
	e.record(pending)
	e.do("POST", "/api/orders/"+pending+"/pay", tok, nil).wantError(t, 409, CodeInvalidState) // PROCESSING
	e.do("POST", "/api/orders/"+pending+"/cancel", tok, nil)
	e.do("POST", "/api/orders/"+pending+"/pay", tok, nil).wantError(t, 409, CodeInvalidState)
	e.do("POST", "/api/orders/"+no[:len(no)-1]+"8/pay", tok, nil).wantError(t, 404, CodeNotFound)
}

// callback posts a signed payment callback.
func (e *env) callback(no, paymentNo string, amount int64, sign func([]byte) string) resp {
	e.t.Helper()
	body, sig := callbackBody(no, paymentNo, amount, sign)
	return e.do("POST", "/api/payments/callback", "", body, HeaderSignature, sig)
}

// badCallback is callback for a request outside the contract (a malformed
// signature or field): the contract check skips the request.
func (e *env) badCallback(no, paymentNo string, amount int64, sign func([]byte) string) resp {
	e.t.Helper()
	body, sig := callbackBody(no, paymentNo, amount, sign)
	return e.do("POST", "/api/payments/callback", "", malformed(body), HeaderSignature, sig)
}

func callbackBody(no, paymentNo string, amount int64, sign func([]byte) string) (body []byte, signature string) {
	body = []byte(fmt.Sprintf(`{"orderNo":%q,"paymentNo":%q,"amount":%d,"paidAt":%q}`,
		no, paymentNo, amount, time.Now().UTC().Format(time.RFC3339Nano)))
	if sign == nil {
		sign = func(b []byte) string { return Sign(testPaySecret, b) }
	}
	return body, sign(body)
}

func TestPaymentCallback(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(100))
	no := e.waitingPay(1, pid, 2, "cb") // amount 3998

	// Signature: missing, wrong secret, malformed, for another body.
	e.do("POST", "/api/payments/callback", "", malformed(fmt.Sprintf(`{"orderNo":%q,"paymentNo":"p1","amount":3998,"paidAt":"2026-01-01T00:00:00Z"}`, no))).
		wantError(t, 401, CodeBadSignature)
	e.callback(no, "p1", 3998, func(b []byte) string { return Sign([]byte("wrong"), b) }).wantError(t, 401, CodeBadSignature)
	e.badCallback(no, "p1", 3998, func([]byte) string { return "zz" + strings.Repeat("0", 62) }).wantError(t, 401, CodeBadSignature)
	e.callback(no, "p1", 3998, func([]byte) string { return Sign(testPaySecret, []byte("{}")) }).wantError(t, 401, CodeBadSignature)
	// The signature is lower-case hex, as documented: the same bytes in
	// upper case (accepted before issue 26), or mixed, are refused.
	e.callback(no, "p0", 1, func(b []byte) string { return strings.ToUpper(Sign(testPaySecret, b)) }).wantError(t, 401, CodeBadSignature)
	e.callback(no, "p0", 1, func(b []byte) string {
		s := Sign(testPaySecret, b)
		i := strings.IndexAny(s, "abcdef") // one letter upper-cased
		return s[:i] + strings.ToUpper(s[i:i+1]) + s[i+1:]
	}).wantError(t, 401, CodeBadSignature)

	e.callback(no, "p1", 3997, nil).wantError(t, 409, CodeAmountMismatch)
	e.callback(no[:len(no)-1]+"8", "p1", 3998, nil).wantError(t, 404, CodeNotFound)
	e.badCallback("12345", "p1", 3998, nil).wantError(t, 400, CodeInvalidArgument)
	e.badCallback(no, "bad payment no", 3998, nil).wantError(t, 400, CodeInvalidArgument)
	e.badCallback(no, "p1", -1, nil).wantError(t, 400, CodeInvalidArgument)
	unsigned := []byte(`{"orderNo":"` + no + `","paymentNo":"p1","amount":3998,"paidAt":"2026-01-01"}`)
	msg := e.do("POST", "/api/payments/callback", "", malformed(unsigned), HeaderSignature, Sign(testPaySecret, unsigned)).wantError(t, 400, CodeInvalidArgument)
	if !strings.Contains(msg, "paidAt") {
		t.Fatalf("message %q", msg)
	}

	// Still PROCESSING: 409, the provider retries later.
	processing := e.accepted(2, pid, 1, "cb2")
	e.record(processing)
	e.callback(processing, "p2", 1999, nil).wantError(t, 409, CodeInvalidState)

	// Ten identical callbacks at once: one payment, ten SUCCESS.
	var wg sync.WaitGroup
	body := []byte(fmt.Sprintf(`{"orderNo":%q,"paymentNo":"pay-10x","amount":3998,"paidAt":"2026-05-01T10:00:00Z"}`, no))
	for range 10 {
		wg.Go(func() {
			r := doHTTP(t, e.hc, "POST", "/api/payments/callback", "", body, HeaderSignature, Sign(testPaySecret, body))
			if r.status != 200 || string(r.body) != `{"result":"SUCCESS"}` {
				t.Errorf("concurrent callback: %s", r)
			}
		})
	}
	wg.Wait()
	if e.orderStatus(no) != order.Paid {
		t.Fatalf("status %s, want PAID", e.orderStatus(no))
	}
	var n int
	e.store.DB.QueryRow(`SELECT COUNT(*) FROM payment WHERE order_no = ?`, no).Scan(&n)
	if n != 1 {
		t.Fatalf("%d payment rows, want 1", n)
	}
	st, _ := e.store.GetStock(context.Background(), pid)
	if st.Sold != 2 || st.Locked != 0 {
		t.Fatalf("stock %+v", st)
	}
}

// A payment for an order the buyer cancelled is kept for refund; the order
// stays CANCELLED.
func TestLatePaymentAfterCancel(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))
	no := e.waitingPay(1, pid, 1, "late")
	if r := e.do("POST", "/api/orders/"+no+"/cancel", token(t, 1), nil); r.status != 200 {
		t.Fatalf("cancel: %s", r)
	}
	for range 2 { // and its duplicate
		if r := e.callback(no, "late-pay", 1999, nil); r.status != 200 || string(r.body) != `{"result":"SUCCESS"}` {
			t.Fatalf("late callback: %s", r)
		}
	}
	var status string
	e.store.DB.QueryRow(`SELECT status FROM payment WHERE payment_no = 'late-pay'`).Scan(&status)
	if status != persistence.PaymentRefundPending {
		t.Fatalf("payment status %q", status)
	}
	if s := e.orderStatus(no); s != order.Cancelled {
		t.Fatalf("order %s, want CANCELLED", s)
	}
}
