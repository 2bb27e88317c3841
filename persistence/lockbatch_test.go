package persistence_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

func lockEvents(nos []string) []persistence.LockEvent {
	out := make([]persistence.LockEvent, len(nos))
	for i, no := range nos {
		out[i] = persistence.LockEvent{EventID: order.CreatedEventID(no), OrderNo: no}
	}
	return out
}

// holdRow locks order no in a transaction of its own for d, then commits. It
// returns when the lock is held; done receives the database clock read just
// before the commit released the lock.
func holdRow(t *testing.T, s *persistence.Store, no string, d time.Duration) (done chan time.Time) {
	t.Helper()
	tx, err := s.DB.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`SELECT id FROM order_info WHERE order_no = ? FOR UPDATE`, no); err != nil {
		t.Fatal(err)
	}
	done = make(chan time.Time, 1)
	go func() {
		time.Sleep(d)
		var at time.Time
		tx.QueryRow(`SELECT NOW(3)`).Scan(&at)
		tx.Commit()
		done <- at
	}()
	return done
}

// The pay window starts when the order was locked, after any wait for its row
// lock (issue 18.4): both the batch and the per-message lock.
func TestPayDeadlineStartsAfterLockWait(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	const payTimeout = time.Minute
	const wait = 1500 * time.Millisecond
	_, nos := processing(t, s, 10, 2, 1)
	for i, lock := range []func(no string) error{
		func(no string) error {
			_, err := s.LockStockBatch(ctx, "order-lock", lockEvents([]string{no}), payTimeout)
			return err
		},
		func(no string) error {
			_, _, err := s.LockStock(ctx, order.CreatedEventID(no), no, "order-lock", payTimeout)
			return err
		},
	} {
		no := nos[i]
		done := holdRow(t, s, no, wait)
		start := time.Now()
		if err := lock(no); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < wait {
			t.Fatalf("lock %d returned after %v: the row lock was not waited for", i, waited)
		}
		released := <-done
		o, err := s.GetOrder(ctx, no)
		if err != nil || o.PayDeadline == nil {
			t.Fatalf("order %s: %+v %v", no, o, err)
		}
		// The window counts from the lock being granted, i.e. no earlier
		// than its release by the holder (the database's clock on both).
		if short := released.Add(payTimeout).Sub(*o.PayDeadline); short > 0 {
			t.Errorf("lock %d: pay deadline %v is %v short of a full window from the lock (released %v)", i, *o.PayDeadline, short, released)
		}
		if o.PayDeadline.Sub(o.UpdatedAt) != payTimeout {
			t.Errorf("lock %d: deadline %v is not updated_at %v + %v", i, *o.PayDeadline, o.UpdatedAt, payTimeout)
		}
	}
}

// A lock wait longer than the session's innodb_lock_wait_timeout fails with
// MySQL's lock-wait error, retryable and named as such (issue 18.5), not
// with a cancelled context on an abandoned connection.
func TestLockWaitSurfacesAsLockWait(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	_, nos := processing(t, s, 10, 1, 1)
	short, err := persistence.Open(context.Background(), persistencetest.DSNFor(t, "persistence")+"?innodb_lock_wait_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	done := holdRow(t, s, nos[0], 3*time.Second)
	defer func() { <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = short.LockStockBatch(ctx, "order-lock", lockEvents(nos), time.Minute)
	if !persistence.IsLockWait(err) || !persistence.IsRetryable(err) || !strings.Contains(err.Error(), "Lock wait timeout") {
		t.Fatalf("err = %v, want a retryable lock wait timeout", err)
	}
	var dflt sql.NullString
	if err := s.DB.QueryRow(`SELECT @@SESSION.innodb_lock_wait_timeout`).Scan(&dflt); err != nil || dflt.String != "10" {
		t.Errorf("default session lock wait timeout %q (%v), want 10", dflt.String, err)
	}
}

// CloseDueBatch closes exactly the due WAITING_PAY orders, gives their stock
// back once per product, skips an order another transaction holds (closed by
// a later pass) and never touches a paid or not-yet-due order.
func TestCloseDueBatch(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	p1, due1 := fixture(t, s, 20, 5, 2, time.Second)
	p2, due2 := fixture(t, s, 20, 4, 1, time.Second)
	_, later := fixture(t, s, 20, 2, 1, time.Hour)
	paid := due1[0]
	o, err := s.GetOrder(ctx, paid)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := s.Pay(ctx, persistence.Payment{PaymentNo: "p-" + paid, OrderNo: paid, Amount: o.Amount, PaidAt: time.Now()}); err != nil || out != persistence.PayPaid {
		t.Fatalf("pay: %v %v", out, err)
	}
	time.Sleep(1100 * time.Millisecond) // the 1s deadlines pass
	held := due2[0]
	done := holdRow(t, s, held, 2*time.Second)

	closed, err := s.CloseDueBatch(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]string{}, due1[1:]...), due2[1:]...)
	if len(closed) != len(want) {
		t.Fatalf("closed %d orders, want %d", len(closed), len(want))
	}
	for _, no := range want {
		if n := flows(t, s, order.FlowRelease, no); n != 1 {
			t.Errorf("%s: %d RELEASE flows", no, n)
		}
		o, _ := s.GetOrder(ctx, no)
		if o.Status != order.Cancelled || o.CloseReason != string(order.ReasonTimeout) || o.Version != 3 {
			t.Errorf("%s: %+v", no, o)
		}
	}
	// One status batch per product carries the closes.
	rows, err := s.DB.Query(`SELECT payload FROM mq_outbox WHERE event_type = ? AND routing_key = ?`, string(order.EventStatusBatch), order.RouteStatus(order.Cancelled))
	if err != nil {
		t.Fatal(err)
	}
	announced := map[string]int{}
	batches := 0
	for rows.Next() {
		var body []byte
		rows.Scan(&body)
		ev, err := order.DecodeEvent(body)
		if err != nil {
			t.Fatal(err)
		}
		batches++
		for _, x := range ev.Events {
			if x.Version == 3 && x.Reason == string(order.ReasonTimeout) {
				announced[x.OrderNo]++
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if batches != 2 {
		t.Errorf("%d CANCELLED status batches for one pass over 2 products, want 2", batches)
	}
	for _, no := range want {
		if announced[no] != 1 {
			t.Errorf("%s: announced %d times in the status batches", no, announced[no])
		}
	}
	if st := checkStock(t, s, p1.ID); st.Locked != 0 || st.Sold != 2 || st.Available != 18 {
		t.Errorf("product 1 stock %+v", st)
	}
	if st := checkStock(t, s, p2.ID); st.Locked != 1 || st.Available != 19 {
		t.Errorf("product 2 stock %+v (the held order stays locked)", st)
	}
	for _, no := range append([]string{paid, held}, later...) {
		if n := flows(t, s, order.FlowRelease, no); n != 0 {
			t.Errorf("%s released", no)
		}
	}
	<-done
	closed, err = s.CloseDueBatch(ctx, 100)
	if err != nil || len(closed) != 1 || closed[0].OrderNo != held {
		t.Fatalf("second pass closed %v (%v), want the held order", closed, err)
	}
	if closed, err = s.CloseDueBatch(ctx, 100); err != nil || len(closed) != 0 {
		t.Fatalf("third pass closed %d (%v)", len(closed), err)
	}
	if st := checkStock(t, s, p2.ID); st.Locked != 0 || st.Available != 20 {
		t.Errorf("product 2 stock %+v", st)
	}
}

// A close pass over several products gives each its units back in one
// statement that must change every product's stock row: if one product's
// locked units do not cover its closes (a stock row repaired by hand, say),
// the whole pass fails and changes nothing, for every product.
func TestCloseDueBatchStockShortFailsWholePass(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	p1, due1 := fixture(t, s, 20, 3, 1, time.Second)
	p2, _ := fixture(t, s, 20, 3, 1, time.Second)
	if _, err := s.DB.Exec(`UPDATE stock SET locked = 1, available = available + 2 WHERE product_id = ?`, p2.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if closed, err := s.CloseDueBatch(ctx, 100); err == nil {
		t.Fatalf("closed %d orders over a stock row that cannot give them back", len(closed))
	}
	for _, no := range due1 {
		if o, _ := s.GetOrder(ctx, no); o.Status != order.WaitingPay || flows(t, s, order.FlowRelease, no) != 0 {
			t.Errorf("%s: %s after the failed pass", no, o.Status)
		}
	}
	if st := checkStock(t, s, p1.ID); st.Locked != 3 {
		t.Errorf("product 1 stock %+v after the failed pass", st)
	}
}
