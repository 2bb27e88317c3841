package persistence

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// The consume log, mq_consume_log: one row per (event_id, consumer_name)
// applied. Its primary key makes every consumer's effect at-most-once per
// event: a redelivered or replayed event finds its row and is acknowledged
// as a duplicate. Rows are written in the transaction of the effect.

// RecordConsumed inserts (eventID, consumer) into the consume log inside tx.
// first is false if the pair was there already: the event was applied before
// and the caller must not apply it again.
func RecordConsumed(ctx context.Context, tx *sql.Tx, eventID, consumer string) (first bool, err error) {
	_, err = tx.ExecContext(ctx, `INSERT INTO mq_consume_log (event_id, consumer_name) VALUES (?, ?)`, eventID, consumer)
	if IsDuplicate(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("persistence: consume log: %w", err)
	}
	return true, nil
}

// consumedBefore returns which of eventIDs (sorted, distinct) consumer has
// applied, read inside tx. Under READ COMMITTED the read sees every commit
// made before the caller's row locks were granted.
func consumedBefore(ctx context.Context, tx *sql.Tx, consumer string, eventIDs []string) (map[string]bool, error) {
	seen := make(map[string]bool, len(eventIDs))
	rows, err := tx.QueryContext(ctx, `SELECT event_id FROM mq_consume_log WHERE consumer_name = ? AND event_id IN (`+marks(len(eventIDs))+`)`,
		append([]any{consumer}, anys(eventIDs)...)...)
	if err != nil {
		return nil, fmt.Errorf("read consume log: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		seen[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read consume log: %w", err)
	}
	return seen, nil
}

// insertConsumed records eventIDs in the consume log of consumer; every pair
// must be new (a duplicate fails the statement).
func insertConsumed(ctx context.Context, tx *sql.Tx, eventIDs []string, consumer string) error {
	const cols = 2
	for _, chunk := range chunks(len(eventIDs), MaxPlaceholders/cols) {
		args := make([]any, 0, (chunk[1]-chunk[0])*cols)
		for _, id := range eventIDs[chunk[0]:chunk[1]] {
			args = append(args, id, consumer)
		}
		q := `INSERT INTO mq_consume_log (event_id, consumer_name) VALUES ` + strings.TrimSuffix(strings.Repeat("(?,?),", chunk[1]-chunk[0]), ",")
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("consume log: %w", err)
		}
	}
	return nil
}
