package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// Stock adjustments: the MySQL half of an admin stock repair (the ADJUST
// flow and stock.available), and the flows the sweeper reads to complete
// a Redis half that is missing.

// ErrNegativeStock is an adjustment that would make MySQL available stock
// negative.
var ErrNegativeStock = errors.New("persistence: adjustment would make available stock negative")

// MaxUnits is the most units a product may have: its stock at creation, and
// its total after every stock adjustment (Total + Adjusted). It keeps every
// stock sum far inside int64 and inside JavaScript's safe integers (2^53).
const MaxUnits = 1_000_000_000

// ErrTooManyUnits is an adjustment that would make the product's total after
// adjustments exceed MaxUnits.
var ErrTooManyUnits = fmt.Errorf("persistence: adjustment would make the product's units exceed %d", MaxUnits)

// AdjustResult is the outcome of AdjustStock.
type AdjustResult struct {
	// Applied is false when repairNo had been applied before (with the same
	// delta): nothing changed.
	Applied bool
	// Delta is the delta of the repair's ADJUST flow.
	Delta int64
	// Available is stock.available after the call.
	Available int64
}

// AdjustStock applies a stock repair in one transaction: it writes the
// (ADJUST, repairNo) flow with delta and adds delta to stock.available.
// Applying the same repairNo again with the same delta changes nothing
// (Applied false); with another delta, or for another product, it returns
// ErrConflict. ErrNotFound: no such product; ErrNegativeStock: available would
// go below 0; ErrTooManyUnits: the product's total after adjustments would
// exceed MaxUnits (nothing written in either case).
func (s *Store) AdjustStock(ctx context.Context, productID int64, repairNo string, delta int64, reason string) (AdjustResult, error) {
	return s.AdjustStockBy(ctx, 0, productID, repairNo, delta, reason)
}

// AdjustStockBy is AdjustStock by admin adminID: with adminID > 0 an applied
// repair also writes its admin_audit entry (ActionAdjust) in the same
// transaction; a repeat that changes nothing writes none.
func (s *Store) AdjustStockBy(ctx context.Context, adminID, productID int64, repairNo string, delta int64, reason string) (AdjustResult, error) {
	var res AdjustResult
	if len(reason) > 200 {
		reason = reason[:200]
	}
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		res = AdjustResult{Delta: delta}
		var avail, units int64
		err := tx.QueryRowContext(ctx, `SELECT available FROM stock WHERE product_id = ? FOR UPDATE`, productID).Scan(&avail)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		// The product's units now: read after the stock row lock, which every
		// adjustment of the product takes, so no other one is in between
		// (product.total never changes; the product row is not locked).
		err = tx.QueryRowContext(ctx, `SELECT p.total + (SELECT COALESCE(SUM(f.quantity), 0) FROM stock_flow f
			WHERE f.product_id = p.id AND f.biz_type = ?) FROM product p WHERE p.id = ?`,
			string(order.FlowAdjust), productID).Scan(&units)
		if err != nil {
			return err
		}
		var pid, qty int64
		err = tx.QueryRowContext(ctx, `SELECT product_id, quantity FROM stock_flow WHERE biz_type = ? AND biz_no = ?`,
			string(order.FlowAdjust), repairNo).Scan(&pid, &qty)
		switch {
		case err == nil:
			if pid != productID || qty != delta {
				return fmt.Errorf("%w: repair %s was applied with delta %d to product %d", ErrConflict, repairNo, qty, pid)
			}
			res.Available = avail
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		// |delta| and units are far below 2^62 when these run (the gateway
		// bounds delta by MaxUnits; overflow is checked anyway).
		if delta < -MaxUnits || avail+delta < 0 {
			return ErrNegativeStock
		}
		if delta > MaxUnits || units+delta > MaxUnits {
			return ErrTooManyUnits
		}
		inserted, err := insertFlow(ctx, tx, order.FlowAdjust, repairNo, productID, delta, reason)
		if err != nil {
			return err
		}
		if !inserted { // written meanwhile for another product
			return fmt.Errorf("%w: repair %s was applied concurrently", ErrConflict, repairNo)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE stock SET available = available + ?, version = version + 1, updated_at = NOW(3)
			WHERE product_id = ?`, delta, productID); err != nil {
			return err
		}
		if adminID > 0 {
			if err := insertAudit(ctx, tx, adminID, ActionAdjust, productID,
				map[string]any{"repairNo": repairNo, "delta": delta, "reason": reason}); err != nil {
				return err
			}
		}
		res.Applied, res.Available = true, avail+delta
		return nil
	})
	if err != nil {
		return AdjustResult{}, fmt.Errorf("persistence: adjust stock %d by %d (%s): %w", productID, delta, repairNo, err)
	}
	return res, nil
}

// AdjustFlow is an ADJUST stock flow.
type AdjustFlow struct {
	RepairNo  string
	ProductID int64
	Delta     int64
}

// RecentAdjustFlows returns the ADJUST flows written in the last `within`
// (database clock), oldest first.
func (s *Store) RecentAdjustFlows(ctx context.Context, within time.Duration) ([]AdjustFlow, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT biz_no, product_id, quantity FROM stock_flow
		WHERE biz_type = ? AND created_at >= NOW(3) - INTERVAL ? MICROSECOND ORDER BY id`,
		string(order.FlowAdjust), within.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("persistence: adjust flows: %w", err)
	}
	defer rows.Close()
	var out []AdjustFlow
	for rows.Next() {
		var f AdjustFlow
		if err := rows.Scan(&f.RepairNo, &f.ProductID, &f.Delta); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}
