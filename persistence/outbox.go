package persistence

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// Outbox statuses (mq_outbox.status).
const (
	OutboxNew     = "NEW"
	OutboxSending = "SENDING" // claimed by a relay until next_retry_at (the lease)
	OutboxSent    = "SENT"
	OutboxRetry   = "RETRY"
	OutboxDead    = "DEAD"
)

// OutboxMessage is an event to publish after the transaction that appended it
// commits.
type OutboxMessage struct {
	EventID    string
	EventType  order.EventType
	OrderNo    string
	Exchange   string
	RoutingKey string
	Payload    []byte
	DelayMS    int64 // > 0: publish with a per-message TTL of what is left of DelayMS since the row was created
}

// OutboxRow is a claimed outbox row.
type OutboxRow struct {
	ID int64
	OutboxMessage
	RetryCount  int
	RemainingMS int64 // for delayed messages: DelayMS minus the time since creation, >= 0
}

// AppendOutbox adds msgs to the outbox inside the caller's transaction. A
// message whose eventId is already in the outbox is ignored. It returns how
// many rows were new.
func AppendOutbox(ctx context.Context, tx *sql.Tx, msgs ...OutboxMessage) (int64, error) {
	return appendOutbox(ctx, tx, msgs)
}

// appendOutbox inserts msgs, ignoring eventIds already present (a writer
// batch that is redelivered).
func appendOutbox(ctx context.Context, tx *sql.Tx, msgs []OutboxMessage) (int64, error) {
	return insertOutbox(ctx, tx, msgs, true)
}

// appendNewOutbox inserts msgs that cannot exist yet: events of a transition
// that the caller's conditional update just won. A plain INSERT takes no
// next-key locks on the unique index, unlike ON DUPLICATE KEY UPDATE, so
// concurrent consumers do not deadlock on it.
func appendNewOutbox(ctx context.Context, tx *sql.Tx, msgs []OutboxMessage) error {
	_, err := insertOutbox(ctx, tx, msgs, false)
	return err
}

func insertOutbox(ctx context.Context, tx *sql.Tx, msgs []OutboxMessage, ignoreDuplicates bool) (int64, error) {
	const cols = 7
	var total int64
	for _, chunk := range chunks(len(msgs), MaxPlaceholders/cols) {
		var b strings.Builder
		args := make([]any, 0, (chunk[1]-chunk[0])*cols)
		b.WriteString(`INSERT INTO mq_outbox (event_id, event_type, order_no, exchange_name, routing_key, payload, delay_ms) VALUES `)
		for i, m := range msgs[chunk[0]:chunk[1]] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("(?,?,?,?,?,?,?)")
			args = append(args, m.EventID, string(m.EventType), m.OrderNo, m.Exchange, m.RoutingKey, m.Payload, m.DelayMS)
		}
		if ignoreDuplicates {
			b.WriteString(` ON DUPLICATE KEY UPDATE id = id`)
		}
		res, err := tx.ExecContext(ctx, b.String(), args...)
		if err != nil {
			return total, fmt.Errorf("persistence: append outbox: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}

// StatusMessage builds the ORDER_STATUS_CHANGED outbox message for e (its
// EventID and Type are set here from OrderNo and Version).
func StatusMessage(e order.Event) (OutboxMessage, error) {
	e.EventID = order.StatusEventID(e.OrderNo, e.Version)
	e.Type = order.EventStatusChanged
	body, err := json.Marshal(e)
	if err != nil {
		return OutboxMessage{}, err
	}
	return OutboxMessage{EventID: e.EventID, EventType: e.Type, OrderNo: e.OrderNo,
		Exchange: order.EventsExchange, RoutingKey: order.RouteStatus(e.Status), Payload: body}, nil
}

// CreatedMessage builds the ORDER_CREATED outbox message of reservation r,
// stored as a PROCESSING order (version 1) at its accepted time.
func CreatedMessage(r order.Reservation) (OutboxMessage, error) {
	e := order.Event{EventID: order.CreatedEventID(r.OrderNo), Type: order.EventCreated,
		OrderNo: r.OrderNo, UserID: r.UserID, ProductID: r.ProductID, Quantity: r.Quantity, Amount: r.Amount(),
		Status: order.Processing, Version: 1, OccurredAt: r.AcceptedAt}
	body, err := json.Marshal(e)
	if err != nil {
		return OutboxMessage{}, err
	}
	return OutboxMessage{EventID: e.EventID, EventType: e.Type, OrderNo: e.OrderNo,
		Exchange: order.EventsExchange, RoutingKey: order.RouteCreated, Payload: body}, nil
}

// PayTimeoutMessage builds the delayed close message of o (of the per-order
// lock, Store.LockStock): published to order.PayTimeoutDelayQueue with a TTL of payTimeout,
// it expires at the pay deadline into the order-close queue.
func PayTimeoutMessage(o Order, deadline, now time.Time, payTimeout time.Duration) (OutboxMessage, error) {
	e := order.Event{EventID: order.PayTimeoutEventID(o.OrderNo), Type: order.EventPayTimeout,
		OrderNo: o.OrderNo, UserID: o.UserID, ProductID: o.ProductID, Quantity: o.Quantity, PayDeadline: &deadline, OccurredAt: now}
	body, err := json.Marshal(e)
	if err != nil {
		return OutboxMessage{}, err
	}
	return OutboxMessage{EventID: e.EventID, EventType: e.Type, OrderNo: e.OrderNo, Exchange: "",
		RoutingKey: order.PayTimeoutDelayQueue, Payload: body, DelayMS: payTimeout.Milliseconds()}, nil
}

// StatusBatchMessage builds one ORDER_STATUS_BATCH outbox message carrying
// events, status changes of one product into one status (each complete as
// StatusMessage would build it). It is routed like a single status change
// into that status.
func StatusBatchMessage(events []order.Event) (OutboxMessage, error) {
	if len(events) == 0 {
		return OutboxMessage{}, errors.New("persistence: empty status batch")
	}
	for i := range events {
		events[i].EventID = order.StatusEventID(events[i].OrderNo, events[i].Version)
		events[i].Type = order.EventStatusChanged
	}
	first := events[0]
	b := order.Event{EventID: order.StatusBatchEventID(first.OrderNo, first.Status), Type: order.EventStatusBatch,
		OrderNo: first.OrderNo, ProductID: first.ProductID, Status: first.Status, OccurredAt: first.OccurredAt, Events: events}
	body, err := json.Marshal(b)
	if err != nil {
		return OutboxMessage{}, err
	}
	return OutboxMessage{EventID: b.EventID, EventType: b.Type, OrderNo: b.OrderNo,
		Exchange: order.EventsExchange, RoutingKey: order.RouteStatus(first.Status), Payload: body}, nil
}

// ClaimOutbox leases up to limit rows that are due: SENDING rows whose lease
// ran out (their relay died) first, then RETRY rows whose next_retry_at has
// passed, then NEW rows, each oldest due first. Rows locked by another
// relay's claim are skipped (FOR UPDATE SKIP LOCKED), so any number of relays
// can claim concurrently. Claimed rows are SENDING until now + lease, owned
// by owner.
//
// Each status is read in order of the index (status, next_retry_at), so a
// claim reads (and locks) only the rows it returns plus those it skips,
// however many SENT rows the table holds; ORDER BY id over the three
// statuses made MariaDB walk the primary key through every SENT row first
// (1 s per claim at 550,000 rows, measured).
func (s *Store) ClaimOutbox(ctx context.Context, owner string, limit int, lease time.Duration) ([]OutboxRow, error) {
	var out []OutboxRow
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		for _, status := range []string{"SENDING", "RETRY", "NEW"} {
			if len(out) >= limit {
				break
			}
			rows, err := tx.QueryContext(ctx, `SELECT id, event_id, event_type, order_no, exchange_name, routing_key, payload, delay_ms, retry_count,
					GREATEST(0, delay_ms - TIMESTAMPDIFF(MICROSECOND, created_at, NOW(3)) DIV 1000)
				FROM mq_outbox FORCE INDEX (idx_outbox_status_next)
				WHERE status = ? AND next_retry_at <= NOW(3)
				ORDER BY next_retry_at LIMIT ? FOR UPDATE SKIP LOCKED`, status, limit-len(out))
			if err != nil {
				return fmt.Errorf("select: %w", err)
			}
			for rows.Next() {
				var r OutboxRow
				var et string
				if err := rows.Scan(&r.ID, &r.EventID, &et, &r.OrderNo, &r.Exchange, &r.RoutingKey, &r.Payload, &r.DelayMS, &r.RetryCount, &r.RemainingMS); err != nil {
					rows.Close()
					return err
				}
				r.EventType = order.EventType(et)
				out = append(out, r)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		if len(out) == 0 {
			return nil
		}
		ids := make([]any, 0, len(out)+2)
		ids = append(ids, owner, lease.Microseconds())
		for _, r := range out {
			ids = append(ids, r.ID)
		}
		_, err := tx.ExecContext(ctx, `UPDATE mq_outbox SET status = 'SENDING', lease_owner = ?,
			next_retry_at = NOW(3) + INTERVAL ? MICROSECOND, updated_at = NOW(3)
			WHERE id IN (`+marks(len(out))+`)`, ids...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("persistence: claim outbox: %w", err)
	}
	return out, nil
}

// MarkSent marks rows SENT that are still SENDING under owner's lease. Call
// it only after the broker confirmed them. A row whose lease ran out and
// that another relay claimed is left to that relay (its publish and ours
// are the same event: consumers deduplicate by event id).
func (s *Store) MarkSent(ctx context.Context, owner string, ids []int64) error {
	for _, chunk := range chunks(len(ids), 10000) {
		args := make([]any, 0, chunk[1]-chunk[0]+1)
		args = append(args, owner)
		for _, id := range ids[chunk[0]:chunk[1]] {
			args = append(args, id)
		}
		_, err := s.DB.ExecContext(ctx, `UPDATE mq_outbox SET status = 'SENT', updated_at = NOW(3), last_error = NULL
			WHERE lease_owner = ? AND id IN (`+marks(len(args)-1)+`) AND status = 'SENDING'`, args...)
		if err != nil {
			return fmt.Errorf("persistence: mark sent: %w", err)
		}
	}
	return nil
}

// PendingOutboxFor counts the outbox rows not yet published (NEW, RETRY,
// SENDING) of the orders of productIDs.
func (s *Store) PendingOutboxFor(ctx context.Context, productIDs []int64) (int64, error) {
	if len(productIDs) == 0 {
		return 0, nil
	}
	args := make([]any, len(productIDs))
	for i, id := range productIDs {
		args[i] = id
	}
	var n int64
	err := s.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM mq_outbox o FORCE INDEX (idx_outbox_status_next)
		JOIN order_info i ON i.order_no = o.order_no
		WHERE o.status IN ('NEW', 'RETRY', 'SENDING') AND i.product_id IN (`+marks(len(args))+`)`, args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("persistence: pending outbox: %w", err)
	}
	return n, nil
}

// PurgeSentOutbox deletes up to limit SENT outbox rows published more than
// olderThan ago, oldest first, and returns how many it deleted. The publish
// time is taken from next_retry_at, which a claim sets to its lease expiry
// (the publish time plus at most the lease). A purged event can no longer be
// replayed from the dead-letter queue through the outbox (ReplayOutbox finds
// no row), so olderThan must outlast the time an operator takes to look at
// dead letters.
func (s *Store) PurgeSentOutbox(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	// A plain (non-locking) read picks the rows; the DELETE then locks only
	// them, by primary key. A ranged DELETE … ORDER BY … LIMIT locked index
	// records next to the range too and deadlocked with the relay's claims
	// and MarkSent under load.
	rows, err := s.DB.QueryContext(ctx, `SELECT id FROM mq_outbox FORCE INDEX (idx_outbox_status_next)
		WHERE status = 'SENT' AND next_retry_at < NOW(3) - INTERVAL ? MICROSECOND
		ORDER BY next_retry_at LIMIT ?`, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("persistence: purge sent outbox: %w", err)
	}
	var ids []any
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("persistence: purge sent outbox: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, err
	}
	res, err := s.DB.ExecContext(ctx, `DELETE FROM mq_outbox WHERE id IN (`+marks(len(ids))+`) AND status = 'SENT'`, ids...)
	if err != nil {
		return 0, fmt.Errorf("persistence: purge sent outbox: %w", err)
	}
	return res.RowsAffected()
}

// MarkRetry records a failed publish of row id: RETRY after backoff, or DEAD
// once retry_count reaches maxRetries.
func (s *Store) MarkRetry(ctx context.Context, id int64, cause string, backoff time.Duration, maxRetries int) error {
	if len(cause) > 500 {
		cause = cause[:500]
	}
	_, err := s.DB.ExecContext(ctx, `UPDATE mq_outbox SET
			status = IF(retry_count + 1 >= ?, 'DEAD', 'RETRY'),
			retry_count = retry_count + 1,
			next_retry_at = NOW(3) + INTERVAL ? MICROSECOND,
			last_error = ?, updated_at = NOW(3)
		WHERE id = ? AND status = 'SENDING'`, maxRetries, backoff.Microseconds(), cause, id)
	if err != nil {
		return fmt.Errorf("persistence: mark retry: %w", err)
	}
	return nil
}

// MarkRetryBatch is MarkRetry for many rows with the same cause, in one
// statement: each row's backoff is base·2^retry_count (its count before this
// failure), at most maxBackoff. Rows whose retry_count reaches maxRetries
// become DEAD. Only rows still SENDING under owner's lease change (see
// MarkSent). It returns the ids that became DEAD.
func (s *Store) MarkRetryBatch(ctx context.Context, owner string, ids []int64, cause string, base, maxBackoff time.Duration, maxRetries int) (dead []int64, err error) {
	if len(cause) > 500 {
		cause = cause[:500]
	}
	for _, chunk := range chunks(len(ids), 10000) {
		args := []any{maxRetries, base.Microseconds(), maxBackoff.Microseconds(), cause, owner}
		idArgs := make([]any, 0, chunk[1]-chunk[0])
		for _, id := range ids[chunk[0]:chunk[1]] {
			idArgs = append(idArgs, id)
		}
		args = append(args, idArgs...)
		_, err := s.DB.ExecContext(ctx, `UPDATE mq_outbox SET
				status = IF(retry_count + 1 >= ?, 'DEAD', 'RETRY'),
				next_retry_at = NOW(3) + INTERVAL CAST(LEAST(? * POW(2, LEAST(retry_count, 30)), ?) AS UNSIGNED) MICROSECOND,
				retry_count = retry_count + 1,
				last_error = ?, updated_at = NOW(3)
			WHERE lease_owner = ? AND id IN (`+marks(len(idArgs))+`) AND status = 'SENDING'`, args...)
		if err != nil {
			return dead, fmt.Errorf("persistence: mark retry: %w", err)
		}
		rows, err := s.DB.QueryContext(ctx, `SELECT id FROM mq_outbox WHERE id IN (`+marks(len(idArgs))+`) AND status = 'DEAD'`, idArgs...)
		if err != nil {
			return dead, fmt.Errorf("persistence: mark retry: %w", err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return dead, err
			}
			dead = append(dead, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return dead, err
		}
	}
	return dead, nil
}

// OutboxCounts returns the number of outbox rows per status, and the age of
// the oldest NEW or RETRY row (0 if none).
func (s *Store) OutboxCounts(ctx context.Context) (map[string]int64, time.Duration, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT status, COUNT(*) FROM mq_outbox GROUP BY status`)
	if err != nil {
		return nil, 0, fmt.Errorf("persistence: outbox counts: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, 0, err
		}
		out[st] = n
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	var ageMS sql.NullInt64
	err = s.DB.QueryRowContext(ctx, `SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(3)) DIV 1000 FROM mq_outbox
		WHERE status IN ('NEW', 'RETRY', 'SENDING')`).Scan(&ageMS)
	if err != nil {
		return nil, 0, fmt.Errorf("persistence: outbox age: %w", err)
	}
	return out, time.Duration(ageMS.Int64) * time.Millisecond, nil
}
