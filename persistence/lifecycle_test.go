package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// fixture creates a product with total units and n WAITING_PAY orders of qty
// each, locked with payTimeout.
func fixture(t *testing.T, s *persistence.Store, total int64, n int, qty int64, payTimeout time.Duration) (persistence.Product, []string) {
	t.Helper()
	p, nos := processing(t, s, total, n, qty)
	for _, no := range nos {
		if out, _, err := s.LockStock(context.Background(), order.CreatedEventID(no), no, "order-lock", payTimeout); err != nil || out != persistence.LockLocked {
			t.Fatalf("lock %s: %v %v", no, out, err)
		}
	}
	return p, nos
}

// nextUser gives every processing fixture users of its own.
var nextUser atomic.Int64

// processing creates a product with total units and n PROCESSING orders of
// qty each (users of their own), as the writer stores them.
func processing(t *testing.T, s *persistence.Store, total int64, n int, qty int64) (persistence.Product, []string) {
	t.Helper()
	ctx := context.Background()
	p, err := s.CreateProduct(ctx, persistence.Product{Name: "p", Price: 250, Total: total, MaxPerOrder: 10,
		SaleStart: time.Now().Add(-time.Hour), SaleEnd: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := order.NewNoGenerator(2)
	var batch []order.Reservation
	var nos []string
	for i := range n {
		r := order.Reservation{OrderNo: gen.Next(p.ID, 0), UserID: nextUser.Add(1), RequestID: fmt.Sprintf("r%d", i),
			ProductID: p.ID, Quantity: qty, UnitPrice: 250, AcceptedAt: time.Now().UTC()}
		batch = append(batch, r)
		nos = append(nos, r.OrderNo)
	}
	if _, err := s.InsertReservations(ctx, batch, map[int64]string{p.ID: p.Name}); err != nil {
		t.Fatal(err)
	}
	return p, nos
}

func flows(t *testing.T, s *persistence.Store, typ order.FlowType, no string) int {
	t.Helper()
	var n int
	if err := s.DB.QueryRow(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = ? AND biz_no = ?`, string(typ), no).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func checkStock(t *testing.T, s *persistence.Store, pid int64) persistence.Stock {
	t.Helper()
	ctx := context.Background()
	st, err := s.GetStock(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := s.CountOrders(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	units := map[order.Status]int64{}
	for _, c := range counts {
		units[c.Status] = c.Units
	}
	p, _ := s.GetProduct(ctx, pid)
	if st.Locked != units[order.WaitingPay] || st.Sold != units[order.Paid] || st.Available+st.Locked+st.Sold != p.Total {
		t.Fatalf("docs/spec.md §5.3 broken: stock %+v, units by status %v, total %d", st, units, p.Total)
	}
	if a, err := s.AuditFlows(ctx, pid); err != nil || a != (persistence.FlowAudit{}) {
		t.Fatalf("flow audit %+v %v", a, err)
	}
	return st
}

// TestPayTimeoutRace: for 200 orders past their deadline, a payment callback
// and the timeout close are fired together. Each ends PAID xor CANCELLED; a
// CANCELLED one has exactly one RELEASE flow and its payment is REFUND_PENDING;
// a PAID one has none.
func TestPayTimeoutRace(t *testing.T) {
	s := persistencetest.New(t, "lifecycle")
	ctx := context.Background()
	p, nos := fixture(t, s, 400, 200, 2, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // every deadline has passed on the DB clock
	var wg sync.WaitGroup
	for i, no := range nos {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, _, err := s.Pay(ctx, persistence.Payment{PaymentNo: fmt.Sprintf("pay-%d", i), OrderNo: no, Amount: 500, PaidAt: time.Now()}); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			_, err := s.CloseOrder(ctx, persistence.CloseRequest{OrderNo: no, Reason: order.ReasonTimeout, From: []order.Status{order.WaitingPay}, Due: true})
			if err != nil && !errors.Is(err, persistence.ErrInvalidState) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	paid, cancelled := 0, 0
	for _, no := range nos {
		o, err := s.GetOrder(ctx, no)
		if err != nil {
			t.Fatal(err)
		}
		var payStatus string
		if err := s.DB.QueryRow(`SELECT status FROM payment WHERE order_no = ?`, no).Scan(&payStatus); err != nil {
			t.Fatal(err)
		}
		switch o.Status {
		case order.Paid:
			paid++
			if flows(t, s, order.FlowRelease, no) != 0 || flows(t, s, order.FlowConfirm, no) != 1 || payStatus != persistence.PaymentPaid {
				t.Errorf("%s PAID with release/confirm flows %d/%d, payment %s", no, flows(t, s, order.FlowRelease, no), flows(t, s, order.FlowConfirm, no), payStatus)
			}
		case order.Cancelled:
			cancelled++
			if flows(t, s, order.FlowRelease, no) != 1 || flows(t, s, order.FlowConfirm, no) != 0 || payStatus != persistence.PaymentRefundPending {
				t.Errorf("%s CANCELLED with release/confirm flows %d/%d, payment %s", no, flows(t, s, order.FlowRelease, no), flows(t, s, order.FlowConfirm, no), payStatus)
			}
		default:
			t.Errorf("%s ended %s", no, o.Status)
		}
	}
	st := checkStock(t, s, p.ID)
	t.Logf("200 races: %d PAID, %d CANCELLED; stock %+v", paid, cancelled, st)
	if paid+cancelled != 200 {
		t.Fatalf("paid %d + cancelled %d != 200", paid, cancelled)
	}
}

// TestDuplicatePaymentCallbacks: the same paymentNo 10× concurrently → one
// transition, one payment row, ten successes.
func TestDuplicatePaymentCallbacks(t *testing.T) {
	s := persistencetest.New(t, "lifecycle")
	ctx := context.Background()
	p, nos := fixture(t, s, 10, 1, 3, time.Hour)
	outcomes := make(chan persistence.PayOutcome, 10)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, _, err := s.Pay(ctx, persistence.Payment{PaymentNo: "pay-dup", OrderNo: nos[0], Amount: 750, PaidAt: time.Now()})
			if err != nil {
				t.Error(err)
			}
			outcomes <- out
		}()
	}
	wg.Wait()
	close(outcomes)
	got := map[persistence.PayOutcome]int{}
	for o := range outcomes {
		got[o]++
	}
	if got[persistence.PayPaid] != 1 || got[persistence.PayDuplicate] != 9 {
		t.Fatalf("outcomes %v", got)
	}
	var rows int
	s.DB.QueryRow(`SELECT COUNT(*) FROM payment`).Scan(&rows)
	o, _ := s.GetOrder(ctx, nos[0])
	if rows != 1 || o.Status != order.Paid || o.Version != 3 {
		t.Fatalf("payments %d, order %s v%d", rows, o.Status, o.Version)
	}
	if st := checkStock(t, s, p.ID); st.Sold != 3 || st.Available != 7 {
		t.Fatalf("stock %+v", st)
	}
	if _, _, err := s.Pay(ctx, persistence.Payment{PaymentNo: "pay-x", OrderNo: nos[0], Amount: 1, PaidAt: time.Now()}); !errors.Is(err, persistence.ErrAmount) {
		t.Fatalf("wrong amount: %v", err)
	}
}

// TestReleaseManyTimes: one order cancelled by its user 5× concurrently while
// the sweeper and a duplicate close message fire → one RELEASE flow, stock
// back by exactly its quantity.
func TestReleaseManyTimes(t *testing.T) {
	s := persistencetest.New(t, "lifecycle")
	ctx := context.Background()
	p, nos := fixture(t, s, 10, 1, 4, time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	owner, err := s.GetOrder(ctx, nos[0])
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	try := func(req persistence.CloseRequest) {
		defer wg.Done()
		_, err := s.CloseOrder(ctx, req)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			wins++
		case errors.Is(err, persistence.ErrInvalidState):
		default:
			t.Error(err)
		}
	}
	for range 5 {
		wg.Add(1)
		go try(persistence.CloseRequest{OrderNo: nos[0], UserID: owner.UserID, Reason: order.ReasonUser, From: []order.Status{order.Processing, order.WaitingPay}})
	}
	for range 5 { // sweeper + duplicate delayed close messages
		wg.Add(1)
		go try(persistence.CloseRequest{OrderNo: nos[0], Reason: order.ReasonTimeout, From: []order.Status{order.WaitingPay}, Due: true})
	}
	wg.Wait()
	if wins != 1 || flows(t, s, order.FlowRelease, nos[0]) != 1 {
		t.Fatalf("wins %d, release flows %d", wins, flows(t, s, order.FlowRelease, nos[0]))
	}
	if st := checkStock(t, s, p.ID); st.Available != 10 || st.Locked != 0 {
		t.Fatalf("stock %+v", st)
	}
	// Another user's cancel is a not-found.
	if _, err := s.CloseOrder(ctx, persistence.CloseRequest{OrderNo: nos[0], UserID: 2, Reason: order.ReasonUser, From: []order.Status{order.WaitingPay}}); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("other user: %v", err)
	}
}

// TestCancelWhileProcessing: a PROCESSING order cancelled before the consumer
// locks it is skipped by the consumer; nothing locked in MySQL, one RELEASE
// flow of 0 units.
func TestCancelWhileProcessing(t *testing.T) {
	s := persistencetest.New(t, "lifecycle")
	ctx := context.Background()
	p, _ := fixture(t, s, 10, 0, 1, time.Hour)
	gen, _ := order.NewNoGenerator(3)
	r := order.Reservation{OrderNo: gen.Next(p.ID, 0), UserID: 9, RequestID: "x", ProductID: p.ID, Quantity: 2, UnitPrice: 250, AcceptedAt: time.Now().UTC()}
	if _, err := s.InsertReservations(ctx, []order.Reservation{r}, nil); err != nil {
		t.Fatal(err)
	}
	o, err := s.CloseOrder(ctx, persistence.CloseRequest{OrderNo: r.OrderNo, UserID: 9, Reason: order.ReasonUser, From: []order.Status{order.Processing, order.WaitingPay}})
	if err != nil || o.Status != order.Cancelled || o.Version != 2 {
		t.Fatalf("cancel: %+v %v", o, err)
	}
	out, _, err := s.LockStock(ctx, order.CreatedEventID(r.OrderNo), r.OrderNo, "order-lock", time.Hour)
	if err != nil || out != persistence.LockSkipped {
		t.Fatalf("lock after cancel: %v %v", out, err)
	}
	if flows(t, s, order.FlowLock, r.OrderNo) != 0 || flows(t, s, order.FlowRelease, r.OrderNo) != 1 {
		t.Fatalf("flows lock %d release %d", flows(t, s, order.FlowLock, r.OrderNo), flows(t, s, order.FlowRelease, r.OrderNo))
	}
	if st := checkStock(t, s, p.ID); st.Available != 10 {
		t.Fatalf("stock %+v", st)
	}
	// A late payment for the cancelled order is recorded for refund.
	out2, o, err := s.Pay(ctx, persistence.Payment{PaymentNo: "late", OrderNo: r.OrderNo, Amount: 500, PaidAt: time.Now()})
	if err != nil || out2 != persistence.PayRefundPending || o.Status != order.Cancelled {
		t.Fatalf("late payment: %v %s %v", out2, o.Status, err)
	}
	var ps string
	s.DB.QueryRow(`SELECT status FROM payment WHERE payment_no = 'late'`).Scan(&ps)
	if ps != persistence.PaymentRefundPending {
		t.Fatalf("payment status %s", ps)
	}
}

// TestFailedThenCancel: an order FAILED for short MySQL stock cannot be
// cancelled, so it is never released twice.
func TestFailedThenCancel(t *testing.T) {
	s := persistencetest.New(t, "lifecycle")
	ctx := context.Background()
	p, _ := fixture(t, s, 1, 0, 1, time.Hour)
	gen, _ := order.NewNoGenerator(4)
	r := order.Reservation{OrderNo: gen.Next(p.ID, 0), UserID: 9, RequestID: "x", ProductID: p.ID, Quantity: 2, UnitPrice: 250, AcceptedAt: time.Now().UTC()}
	if _, err := s.InsertReservations(ctx, []order.Reservation{r}, nil); err != nil {
		t.Fatal(err)
	}
	out, o, err := s.LockStock(ctx, order.CreatedEventID(r.OrderNo), r.OrderNo, "order-lock", time.Hour)
	if err != nil || out != persistence.LockFailed || o.Status != order.Failed {
		t.Fatalf("lock 2 of 1: %v %+v %v", out, o, err)
	}
	if _, err := s.CloseOrder(ctx, persistence.CloseRequest{OrderNo: r.OrderNo, UserID: 9, Reason: order.ReasonUser, From: []order.Status{order.Processing, order.WaitingPay}}); !errors.Is(err, persistence.ErrInvalidState) {
		t.Fatalf("cancel FAILED: %v", err)
	}
	if flows(t, s, order.FlowRelease, r.OrderNo) != 1 {
		t.Fatalf("release flows %d", flows(t, s, order.FlowRelease, r.OrderNo))
	}
	checkStock(t, s, p.ID)
}
