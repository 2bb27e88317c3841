package persistence

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The outbox rows the relay gave up on (DEAD) and their replay: what the
// dead-letter inspection and replay (pipeline.InspectDLQ, ReplayDLQ) read
// and reset.

// DeadOutboxRow is an outbox row the relay gave up on (status DEAD).
type DeadOutboxRow struct {
	ID         int64     `json:"id"`
	EventID    string    `json:"eventId"`
	EventType  string    `json:"eventType"`
	OrderNo    string    `json:"orderNo"`
	Exchange   string    `json:"exchange"`
	RoutingKey string    `json:"routingKey"`
	RetryCount int       `json:"retryCount"`
	LastError  string    `json:"lastError,omitempty"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// DeadOutbox returns up to limit DEAD outbox rows, oldest first.
func (s *Store) DeadOutbox(ctx context.Context, limit int) ([]DeadOutboxRow, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT id, event_id, event_type, order_no, exchange_name, routing_key,
			retry_count, COALESCE(last_error, ''), updated_at
		FROM mq_outbox WHERE status = 'DEAD' ORDER BY id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("persistence: dead outbox: %w", err)
	}
	defer rows.Close()
	var out []DeadOutboxRow
	for rows.Next() {
		var r DeadOutboxRow
		if err := rows.Scan(&r.ID, &r.EventID, &r.EventType, &r.OrderNo, &r.Exchange, &r.RoutingKey,
			&r.RetryCount, &r.LastError, &r.UpdatedAt); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// OutboxStatuses returns the status of each of eventIDs that has an outbox
// row; absent ids are not in the map.
func (s *Store) OutboxStatuses(ctx context.Context, eventIDs []string) (map[string]string, error) {
	out := make(map[string]string, len(eventIDs))
	for _, c := range chunks(len(eventIDs), 1000) {
		args := make([]any, 0, c[1]-c[0])
		for _, id := range eventIDs[c[0]:c[1]] {
			args = append(args, id)
		}
		rows, err := s.DB.QueryContext(ctx, `SELECT event_id, status FROM mq_outbox WHERE event_id IN (`+marks(len(args))+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("persistence: outbox statuses: %w", err)
		}
		for rows.Next() {
			var id, st string
			if err := rows.Scan(&id, &st); err != nil {
				rows.Close()
				return nil, err
			}
			out[id] = st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReplayOutbox sets the outbox rows of eventIDs that are SENT or DEAD back to
// NEW, due now, with retry_count 0, so the relay publishes them again (the
// consumers still deduplicate them by event id). Rows NEW, RETRY or SENDING
// are on their way already and are left alone. It returns the event ids it
// reset.
func (s *Store) ReplayOutbox(ctx context.Context, eventIDs []string) ([]string, error) {
	var reset []string
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		reset = reset[:0]
		for _, c := range chunks(len(eventIDs), 1000) {
			args := make([]any, 0, c[1]-c[0])
			for _, id := range eventIDs[c[0]:c[1]] {
				args = append(args, id)
			}
			rows, err := tx.QueryContext(ctx, `SELECT event_id FROM mq_outbox
				WHERE event_id IN (`+marks(len(args))+`) AND status IN ('SENT', 'DEAD') FOR UPDATE`, args...)
			if err != nil {
				return err
			}
			var ids []any
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				ids = append(ids, id)
				reset = append(reset, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(ids) == 0 {
				continue
			}
			if _, err := tx.ExecContext(ctx, `UPDATE mq_outbox SET status = 'NEW', retry_count = 0,
					next_retry_at = NOW(3), lease_owner = NULL, last_error = NULL, updated_at = NOW(3)
				WHERE event_id IN (`+marks(len(ids))+`)`, ids...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("persistence: replay outbox: %w", err)
	}
	return reset, nil
}
