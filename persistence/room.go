package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// CountProcessing is the number of productID's orders in PROCESSING: stored
// by a writer, not yet locked by the order-lock consumer. The admission
// pacer (pipeline/pacer.go) reads it as part of the product's backlog; the
// (product_id, status) index makes it one range count.
func (s *Store) CountProcessing(ctx context.Context, productID int64) (int64, error) {
	var n int64
	err := s.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'PROCESSING'`,
		productID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("persistence: count processing of product %d: %w", productID, err)
	}
	return n, nil
}

// RoomTerms is a row of product_drop: a product's waiting-room terms and its
// shuffle seed (0012_drops.sql). Seed is secret until the opening's shuffle
// publishes it; Commitment (hex SHA-256 of the seed) is public from the
// start.
type RoomTerms struct {
	ProductID  int64
	On         bool
	Mode       string        // fifo, random, draw
	PreQueue   time.Duration // how long before the sale's start tickets can be taken; 0 = any time
	Reserve    int64         // draw: reserve list length
	PowCost    int64         // proof-of-work cost (0 = none)
	Ceiling    int64         // admissions per second (0 = the pacer's own ceiling)
	Window     time.Duration // how long an admission lasts
	Seed       string        // 64 hex digits
	Commitment string        // hex SHA-256 of Seed
}

// modeDraw is RoomTerms.Mode of a draw (lua.ModeDraw's value; persistence
// does not import lua).
const modeDraw = "draw"

// SaveRoom stores productID's room terms; a draw an admin turns on needs a
// product with maxPerOrder 1 (ErrDrawOnePerOrder; ErrNotFound without the
// product). The seed and commitment of t are used only when the product has
// none yet: a stored seed never changes, and the stored one is what the
// returned terms carry. With adminID > 0 the same transaction writes the
// admin_audit entry ActionRoom: the room's terms after the change, with the
// commitment (never the seed).
func (s *Store) SaveRoom(ctx context.Context, adminID int64, t RoomTerms) (RoomTerms, error) {
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		if adminID > 0 && t.On && t.Mode == modeDraw { // under the product row's lock: see ErrDrawOnePerOrder
			var maxPer int64
			err := tx.QueryRowContext(ctx, `SELECT max_per_order FROM product WHERE id = ? FOR UPDATE`, t.ProductID).Scan(&maxPer)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return ErrNotFound
			case err != nil:
				return fmt.Errorf("read product: %w", err)
			case maxPer != 1:
				return fmt.Errorf("%w (it has %d)", ErrDrawOnePerOrder, maxPer)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO product_drop
			(product_id, seed, commitment, room_on, mode, pre_queue_ms, reserve_n, pow_cost, ceiling, window_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON DUPLICATE KEY UPDATE room_on = VALUES(room_on), mode = VALUES(mode), pre_queue_ms = VALUES(pre_queue_ms),
				reserve_n = VALUES(reserve_n), pow_cost = VALUES(pow_cost), ceiling = VALUES(ceiling), window_ms = VALUES(window_ms)`,
			t.ProductID, t.Seed, t.Commitment, t.On, t.Mode, t.PreQueue.Milliseconds(), t.Reserve, t.PowCost, t.Ceiling,
			t.Window.Milliseconds()); err != nil {
			return fmt.Errorf("save room terms: %w", err)
		}
		if err := tx.QueryRowContext(ctx, `SELECT seed, commitment FROM product_drop WHERE product_id = ?`, t.ProductID).
			Scan(&t.Seed, &t.Commitment); err != nil {
			return fmt.Errorf("read room seed: %w", err)
		}
		if adminID > 0 {
			return insertAudit(ctx, tx, adminID, ActionRoom, t.ProductID, map[string]any{
				"on": t.On, "mode": t.Mode, "preQueueSeconds": int64(t.PreQueue / time.Second), "reserve": t.Reserve,
				"powCost": t.PowCost, "ceiling": t.Ceiling, "windowSeconds": int64(t.Window / time.Second), "commitment": t.Commitment,
			})
		}
		return nil
	})
	if err != nil {
		return RoomTerms{}, fmt.Errorf("persistence: %w", err)
	}
	return t, nil
}

// Room reads productID's room terms; ErrNotFound when the product never had
// a room.
func (s *Store) Room(ctx context.Context, productID int64) (RoomTerms, error) {
	t := RoomTerms{ProductID: productID}
	var pq, window int64
	err := s.DB.QueryRowContext(ctx, `SELECT room_on, mode, pre_queue_ms, reserve_n, pow_cost, ceiling, window_ms, seed, commitment
		FROM product_drop WHERE product_id = ?`, productID).
		Scan(&t.On, &t.Mode, &pq, &t.Reserve, &t.PowCost, &t.Ceiling, &window, &t.Seed, &t.Commitment)
	if errors.Is(err, sql.ErrNoRows) {
		return RoomTerms{}, ErrNotFound
	}
	if err != nil {
		return RoomTerms{}, fmt.Errorf("persistence: read room of product %d: %w", productID, err)
	}
	t.PreQueue, t.Window = time.Duration(pq)*time.Millisecond, time.Duration(window)*time.Millisecond
	return t, nil
}
