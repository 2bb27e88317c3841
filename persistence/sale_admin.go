package persistence

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Admin audit actions (admin_audit.action).
const (
	ActionCreate = "create" // product created; change = its terms
	ActionPatch  = "patch"  // terms changed; change = {field: {from, to}}
	ActionPause  = "pause"  // change = {paused: {from: false, to: true}}
	ActionResume = "resume" // change = {paused: {from: true, to: false}}
	ActionEnd    = "end"    // change = {saleEnd: {from, to}}
	ActionAdjust = "adjust" // stock repair; change = {repairNo, delta, reason}
	ActionRefund = "refund" // a REFUND_PENDING payment refunded; change = {paymentNo, orderNo, refundNo}
	ActionRoom   = "room"   // waiting-room terms; change = {on, mode, ceiling, windowSeconds, preQueueSeconds, reserve, powCost, commitment} (SaveRoom)
	ActionReplay = "replay" // dead letters replayed; change = {eventIds | all, dropPoison, result}
)

// AuditEntry is a row of admin_audit: who (AdminID, and the identity
// provider's name of that admin when it has one: Admin) did what (Action,
// Change, a JSON object) to which product (ProductID, 0 = none) when (At,
// database clock, UTC).
type AuditEntry struct {
	ID        int64
	At        time.Time
	AdminID   int64
	Admin     Identity // zero for an admin of the direct id range (HS256)
	Action    string
	ProductID int64
	Change    json.RawMessage
}

// Audit writes one admin_audit entry on its own, for an admin action whose
// effect is not in MySQL (a waiting-room setting in Redis, a dead-letter
// replay through RabbitMQ): written after the action succeeded.
func (s *Store) Audit(ctx context.Context, adminID int64, action string, productID int64, change any) error {
	return s.WithTx(ctx, func(tx *sql.Tx) error { return insertAudit(ctx, tx, adminID, action, productID, change) })
}

// FromTo is one field's change in an audit entry.
type FromTo struct {
	From any `json:"from"`
	To   any `json:"to"`
}

func insertAudit(ctx context.Context, tx *sql.Tx, adminID int64, action string, productID int64, change any) error {
	b, err := json.Marshal(change)
	if err != nil {
		return fmt.Errorf("audit change: %w", err)
	}
	var pid any
	if productID > 0 {
		pid = productID
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO admin_audit (admin_id, action, product_id, `change`) VALUES (?, ?, ?, ?)",
		adminID, action, pid, string(b)); err != nil {
		return fmt.Errorf("insert audit: %w", err)
	}
	return nil
}

// terms is the audit record of a product's terms (action create).
func (p Product) terms() map[string]any {
	m := map[string]any{
		"name": p.Name, "price": p.Price, "stock": p.Total, "shards": p.Shards,
		"perUserLimit": p.PerUserLimit, "maxPerOrder": p.MaxPerOrder,
		"saleStart": p.SaleStart.UTC(), "saleEnd": nil,
	}
	if !p.OpenEnded() {
		m["saleEnd"] = p.SaleEnd.UTC()
	}
	if p.ImageURL != "" {
		m["imageUrl"] = p.ImageURL
	}
	if p.Description != "" {
		m["description"] = p.Description
	}
	return m
}

// refuseDrawPerOrder returns ErrDrawOnePerOrder when productID's waiting
// room is on as a draw. Called under the product row's lock; the room's row
// is read with a locking read, which sees the latest committed terms (a
// plain read could see the transaction's older snapshot).
func refuseDrawPerOrder(ctx context.Context, tx *sql.Tx, productID int64) error {
	var on bool
	var mode string
	err := tx.QueryRowContext(ctx, `SELECT room_on, mode FROM product_drop WHERE product_id = ? LOCK IN SHARE MODE`, productID).Scan(&on, &mode)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("read room terms: %w", err)
	case on && mode == modeDraw:
		return ErrDrawOnePerOrder
	}
	return nil
}

// ChangeFunc computes an admin change of cur, the product's row read under
// its lock: the product to store and the audit change (nil or empty: nothing
// changes, nothing is written). An error aborts the change.
type ChangeFunc func(cur Product) (next Product, change map[string]any, err error)

// ChangeProduct applies one admin change of productID in one transaction:
// it locks the row, calls fn, and unless fn changes nothing writes the new
// name, image_url, description, price, per_user_limit, max_per_order,
// sale_start, sale_end and paused, bumps sale_version and inserts the
// admin_audit entry (adminID, action, fn's change). It returns the product
// as stored after (Adjusted included) and whether it changed. ErrNotFound: no
// such product; fn's error as it is.
func (s *Store) ChangeProduct(ctx context.Context, adminID int64, action string, productID int64, fn ChangeFunc) (Product, bool, error) {
	var out Product
	changed := false
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		changed = false
		cur, err := scanProduct(tx.QueryRowContext(ctx, `SELECT `+productCols+` FROM product p WHERE p.id = ? FOR UPDATE`, productID))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		next, change, err := fn(cur)
		if err != nil {
			return err
		}
		if len(change) == 0 {
			out = cur
			return nil
		}
		if next.MaxPerOrder != 1 && next.MaxPerOrder != cur.MaxPerOrder {
			if err := refuseDrawPerOrder(ctx, tx, productID); err != nil {
				return err
			}
		}
		next.SaleVersion = cur.SaleVersion + 1
		if _, err := tx.ExecContext(ctx, `UPDATE product SET name = ?, image_url = ?, description = ?, price = ?,
			per_user_limit = ?, max_per_order = ?, sale_start = ?, sale_end = ?, paused = ?, sale_version = ? WHERE id = ?`,
			next.Name, next.ImageURL, next.Description, next.Price, next.PerUserLimit, next.MaxPerOrder,
			next.SaleStart.UTC(), next.SaleEnd.UTC(), next.Paused, next.SaleVersion, productID); err != nil {
			return fmt.Errorf("update product: %w", err)
		}
		if err := insertAudit(ctx, tx, adminID, action, productID, change); err != nil {
			return err
		}
		out, changed = next, true
		return nil
	})
	if err != nil {
		return Product{}, false, fmt.Errorf("persistence: %s product %d: %w", action, productID, err)
	}
	return out, changed, nil
}

// ListProductsBefore returns up to limit products with id < beforeID (0 =
// no bound), newest first (keyset paging of the admin list).
func (s *Store) ListProductsBefore(ctx context.Context, beforeID int64, limit int) ([]Product, error) {
	if beforeID <= 0 {
		beforeID = 1<<63 - 1
	}
	return s.queryProducts(ctx, `SELECT `+productCols+` FROM product p WHERE p.id < ? ORDER BY p.id DESC LIMIT ?`, beforeID, limit)
}

// ListAudit returns up to limit admin_audit entries with id < beforeID (0 =
// no bound), of productID only when productID > 0, newest first.
func (s *Store) ListAudit(ctx context.Context, productID, beforeID int64, limit int) ([]AuditEntry, error) {
	if beforeID <= 0 {
		beforeID = 1<<63 - 1
	}
	// The identity join is a primary-key lookup per entry (userIDOf).
	q := "SELECT a.id, a.at, a.admin_id, COALESCE(u.issuer, ''), COALESCE(u.subject, ''), a.action, COALESCE(a.product_id, 0), a.`change`" +
		" FROM admin_audit a LEFT JOIN user_identity u ON u.seq = a.admin_id - ? WHERE a.id < ?"
	args := []any{userIDOf(0), beforeID}
	if productID > 0 {
		q += " AND a.product_id = ?"
		args = append(args, productID)
	}
	q += " ORDER BY a.id DESC LIMIT ?"
	args = append(args, limit)
	rows, err := s.DB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("persistence: list audit: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var change string
		if err := rows.Scan(&e.ID, &e.At, &e.AdminID, &e.Admin.Issuer, &e.Admin.Subject, &e.Action, &e.ProductID, &change); err != nil {
			return nil, err
		}
		e.At, e.Change = e.At.UTC(), json.RawMessage(change)
		out = append(out, e)
	}
	return out, rows.Err()
}
