package persistence

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The per-user limit in MySQL (product.per_user_limit > 0): the units one
// user holds in a product's sale — in its orders that are locked
// (WAITING_PAY) or PAID; a CANCELLED or FAILED order gives its units back —
// never exceed the limit, for the whole sale (a product is one sale). An
// order counts from its lock: of two orders not yet locked, the one locked
// first keeps its units.
// reserve.lua holds it in Redis at the reservation, atomically with the
// stock; this is the same rule where an order is locked (takeStock, and
// LockStock), so a limit Redis lost (a restart without persistence, a
// failover) still holds: an order past it is stored FAILED and its Redis
// reservation released, as one that does not fit the stock is.
//
// Two transactions locking orders of one (user, product) at once read each
// other's order rows with a share lock (the latest committed version, not
// the transaction's snapshot): the second waits for the first to commit and
// then counts its orders, or InnoDB breaks a deadlock between them and the
// loser's batch is retried (IsRetryable).

// overLimit reports which claims would take their user past their
// product's per-user limit, deciding in the order given (a batch's earlier
// orders first). Orders of claims are not counted as held (they are the
// ones being decided: stored already by the writer's fast attempt, or
// PROCESSING rows being locked). Claims without a user (userID 0) and of
// products without a limit are never over. One query for the limits, and
// one per limited product.
func overLimit(ctx context.Context, tx *sql.Tx, claims []stockClaim) ([]bool, error) {
	over := make([]bool, len(claims))
	limits, err := perUserLimits(ctx, tx, claims)
	if err != nil || len(limits) == 0 {
		return over, err
	}
	mine := make(map[string]bool, len(claims))
	users := map[int64]map[int64]bool{} // product → users
	for _, c := range claims {
		if limits[c.productID] > 0 && c.userID != 0 {
			mine[c.orderNo] = true
			if users[c.productID] == nil {
				users[c.productID] = map[int64]bool{}
			}
			users[c.productID][c.userID] = true
		}
	}
	type key struct{ product, user int64 }
	held := map[key]int64{}
	for _, pid := range slices.Sorted(maps.Keys(users)) {
		if err := unitsHeld(ctx, tx, pid, slices.Sorted(maps.Keys(users[pid])), mine, func(user, units int64) {
			held[key{pid, user}] += units
		}); err != nil {
			return nil, err
		}
	}
	for k, c := range claims {
		limit := limits[c.productID]
		if limit <= 0 || c.userID == 0 {
			continue
		}
		kk := key{c.productID, c.userID}
		if held[kk]+c.qty > limit {
			over[k] = true
			continue
		}
		held[kk] += c.qty
	}
	return over, nil
}

// perUserLimits reads the per-user limit of every product of claims that
// has one.
func perUserLimits(ctx context.Context, tx *sql.Tx, claims []stockClaim) (map[int64]int64, error) {
	ids := map[int64]bool{}
	for _, c := range claims {
		ids[c.productID] = true
	}
	args := make([]any, 0, len(ids))
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		args = append(args, id)
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, per_user_limit FROM product WHERE per_user_limit > 0 AND id IN (`+
		placeholders(len(args))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("read per-user limits: %w", err)
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var id, limit int64
		if err := rows.Scan(&id, &limit); err != nil {
			return nil, fmt.Errorf("read per-user limits: %w", err)
		}
		out[id] = limit
	}
	return out, rows.Err()
}

// unitsHeld calls add(user, units) for every locked or paid order of users
// in product pid that is not in skip, read with a share lock (the latest
// committed rows; concurrent writers of the same rows wait).
func unitsHeld(ctx context.Context, tx *sql.Tx, pid int64, users []int64, skip map[string]bool, add func(user, units int64)) error {
	for _, chunk := range chunks(len(users), MaxPlaceholders-1) {
		args := []any{pid}
		for _, u := range users[chunk[0]:chunk[1]] {
			args = append(args, u)
		}
		rows, err := tx.QueryContext(ctx, `SELECT user_id, order_no, quantity FROM order_info
			WHERE product_id = ? AND user_id IN (`+placeholders(chunk[1]-chunk[0])+`)
			AND status IN ('WAITING_PAY', 'PAID') LOCK IN SHARE MODE`, args...)
		if err != nil {
			return fmt.Errorf("read units held of product %d: %w", pid, err)
		}
		for rows.Next() {
			var user, qty int64
			var no string
			if err := rows.Scan(&user, &no, &qty); err != nil {
				rows.Close()
				return fmt.Errorf("read units held of product %d: %w", pid, err)
			}
			if !skip[no] {
				add(user, qty)
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("read units held of product %d: %w", pid, err)
		}
	}
	return nil
}

// placeholders is n comma-separated "?".
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}
