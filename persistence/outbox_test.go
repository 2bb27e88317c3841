package persistence_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// appendEvents writes n outbox rows "<prefix>-<i>" in one transaction.
func appendEvents(t *testing.T, s *persistence.Store, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		for i := range n {
			if _, err := persistence.AppendOutbox(ctx, tx, persistence.OutboxMessage{EventID: fmt.Sprintf("%s-%d", prefix, i),
				EventType: "ORDER_CREATED", OrderNo: "0000000000000000001001", Exchange: "x", RoutingKey: "k", Payload: []byte(`{}`)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// handlerReads is the session's InnoDB row reads so far (Handler_read_*).
func handlerReads(t *testing.T, s *persistence.Store) int64 {
	t.Helper()
	rows, err := s.DB.Query(`SHOW SESSION STATUS LIKE 'Handler_read%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// A claim reads the due rows it returns, not the table's history: with
// 5,000 SENT rows before them, claiming 10 NEW rows reads a few dozen rows.
// (ORDER BY id over the three claimable statuses walked the primary key
// through every SENT row: 1 s per claim at 550,000 rows.)
func TestClaimOutboxSkipsSentHistory(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	appendEvents(t, s, "old", 5000)
	if _, err := s.DB.Exec(`UPDATE mq_outbox SET status = 'SENT'`); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, s, "new", 10)
	s.DB.SetMaxOpenConns(1) // the session counters below are the claim's connection's

	before := handlerReads(t, s)
	rows, err := s.ClaimOutbox(ctx, "me", 100, time.Minute)
	if err != nil || len(rows) != 10 {
		t.Fatalf("claimed %d, %v", len(rows), err)
	}
	read := handlerReads(t, s) - before
	if read > 200 {
		t.Errorf("the claim read %d rows for 10 due ones among 5,010", read)
	}
	for i, r := range rows {
		if want := fmt.Sprintf("new-%d", i); r.EventID != want {
			t.Errorf("row %d is %s, want %s (oldest first)", i, r.EventID, want)
		}
	}
}

// Expired leases come first, then retries, then new rows.
func TestClaimOutboxOrder(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	appendEvents(t, s, "ev", 3)
	for id, st := range map[string]string{"ev-0": "NEW", "ev-1": "RETRY", "ev-2": "SENDING"} {
		if _, err := s.DB.Exec(`UPDATE mq_outbox SET status = ?, next_retry_at = NOW(3) - INTERVAL 1 SECOND WHERE event_id = ?`, st, id); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := s.ClaimOutbox(ctx, "me", 2, time.Minute)
	if err != nil || len(rows) != 2 || rows[0].EventID != "ev-2" || rows[1].EventID != "ev-1" {
		t.Fatalf("claimed %+v, %v; want ev-2 (expired lease), ev-1 (retry)", rows, err)
	}
	rows, err = s.ClaimOutbox(ctx, "me", 2, time.Minute)
	if err != nil || len(rows) != 1 || rows[0].EventID != "ev-0" {
		t.Fatalf("second claim %+v, %v", rows, err)
	}
}

// Only SENT rows older than the retention go; NEW, RETRY, DEAD and recent
// SENT rows stay.
func TestPurgeSentOutbox(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	appendEvents(t, s, "ev", 6)
	for id, set := range map[string]string{
		"ev-0": "status = 'SENT', next_retry_at = NOW(3) - INTERVAL 2 HOUR",
		"ev-1": "status = 'SENT', next_retry_at = NOW(3) - INTERVAL 3 HOUR",
		"ev-2": "status = 'SENT', next_retry_at = NOW(3) - INTERVAL 10 MINUTE",
		"ev-3": "status = 'DEAD', next_retry_at = NOW(3) - INTERVAL 3 HOUR",
		"ev-4": "status = 'RETRY', next_retry_at = NOW(3) - INTERVAL 3 HOUR",
	} {
		if _, err := s.DB.Exec(`UPDATE mq_outbox SET `+set+` WHERE event_id = ?`, id); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.PurgeSentOutbox(ctx, time.Hour, 1)
	if err != nil || n != 1 {
		t.Fatalf("first purge: %d, %v", n, err)
	}
	st, _ := s.OutboxStatuses(ctx, []string{"ev-0", "ev-1"})
	if _, ok := st["ev-1"]; ok || st["ev-0"] != "SENT" {
		t.Errorf("limit 1 should delete the oldest (ev-1) first: %v", st)
	}
	if n, err = s.PurgeSentOutbox(ctx, time.Hour, 100); err != nil || n != 1 {
		t.Fatalf("second purge: %d, %v", n, err)
	}
	st, _ = s.OutboxStatuses(ctx, []string{"ev-0", "ev-1", "ev-2", "ev-3", "ev-4", "ev-5"})
	if len(st) != 4 || st["ev-2"] != "SENT" || st["ev-3"] != "DEAD" || st["ev-4"] != "RETRY" || st["ev-5"] != "NEW" {
		t.Errorf("left %v", st)
	}
}

// outboxRow is one mq_outbox row's status, lease owner and retry count.
type outboxRow struct {
	status, owner string
	retries       int
}

// outboxRows returns the rows of ids by id.
func outboxRows(t *testing.T, s *persistence.Store, ids []int64) map[int64]outboxRow {
	t.Helper()
	out := map[int64]outboxRow{}
	for _, id := range ids {
		var r outboxRow
		if err := s.DB.QueryRow(`SELECT status, COALESCE(lease_owner, ''), retry_count FROM mq_outbox WHERE id = ?`, id).
			Scan(&r.status, &r.owner, &r.retries); err != nil {
			t.Fatal(err)
		}
		out[id] = r
	}
	return out
}

// The lease-owner guard (issue 27): relay A's lease ran out (it hung on a
// blocked broker) and relay B claimed its rows; A's late MarkSent and
// MarkRetryBatch leave B's rows as B holds them (SENDING, owner B, retry
// count unchanged). B's own marks then apply. Without the guard A's late
// MarkSent marks rows SENT that B is still publishing, and A's
// MarkRetryBatch moves them to RETRY under B (a second retry count).
func TestMarksOnlyUnderOwnLease(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	ctx := context.Background()
	appendEvents(t, s, "lease", 4)
	a, err := s.ClaimOutbox(ctx, "relay-a", 10, time.Millisecond)
	if err != nil || len(a) != 4 {
		t.Fatalf("relay-a claimed %d, %v", len(a), err)
	}
	time.Sleep(50 * time.Millisecond) // A's lease runs out
	b, err := s.ClaimOutbox(ctx, "relay-b", 10, time.Minute)
	if err != nil || len(b) != 4 {
		t.Fatalf("relay-b claimed %d of relay-a's expired rows, %v", len(b), err)
	}
	ids := make([]int64, len(b))
	for i, r := range b {
		ids[i] = r.ID
	}
	if err := s.MarkSent(ctx, "relay-a", ids[:2]); err != nil {
		t.Fatal(err)
	}
	dead, err := s.MarkRetryBatch(ctx, "relay-a", ids[2:], "confirm timeout", time.Second, time.Minute, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 0 {
		t.Errorf("relay-a's late MarkRetryBatch made %v DEAD (max retries 1)", dead)
	}
	for id, r := range outboxRows(t, s, ids) {
		if r != (outboxRow{"SENDING", "relay-b", 0}) {
			t.Errorf("row %d after relay-a's late marks: %+v, want SENDING under relay-b, 0 retries", id, r)
		}
	}

	// The owner's marks apply.
	if err := s.MarkSent(ctx, "relay-b", ids[:2]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkRetryBatch(ctx, "relay-b", ids[2:], "confirm timeout", time.Second, time.Minute, 5); err != nil {
		t.Fatal(err)
	}
	got := outboxRows(t, s, ids)
	for _, id := range ids[:2] {
		if got[id].status != "SENT" {
			t.Errorf("row %d after relay-b's MarkSent: %+v", id, got[id])
		}
	}
	for _, id := range ids[2:] {
		if got[id].status != "RETRY" || got[id].retries != 1 {
			t.Errorf("row %d after relay-b's MarkRetryBatch: %+v, want RETRY with 1 retry", id, got[id])
		}
	}
}
