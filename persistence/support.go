package persistence

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// OrderFilter selects orders for the support search (SearchOrders). Zero
// fields do not filter. From is inclusive, To exclusive, both on created_at
// (the time the gateway accepted the order).
type OrderFilter struct {
	UserID    int64
	ProductID int64
	Status    order.Status
	From, To  time.Time
}

// Cursor is a keyset position (created_at, id) in a list ordered on them;
// its String form is opaque to clients. The zero Cursor is the start.
type Cursor struct {
	At time.Time
	ID int64
}

// IsZero reports whether c is the start of the list.
func (c Cursor) IsZero() bool { return c.ID == 0 }

// String encodes c as the opaque nextCursor of an API page: base64url of
// "<unix ms>.<id>". "" for the zero Cursor.
func (c Cursor) String() string {
	if c.IsZero() {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.At.UnixMilli(), 10) + "." + strconv.FormatInt(c.ID, 10)))
}

// ParseCursor decodes a Cursor.String; "" is the zero Cursor. Any other
// string that String did not produce is an error.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, fmt.Errorf("persistence: bad cursor")
	}
	ms, id, ok := strings.Cut(string(raw), ".")
	if !ok {
		return Cursor{}, fmt.Errorf("persistence: bad cursor")
	}
	t, err1 := strconv.ParseInt(ms, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if err1 != nil || err2 != nil || n <= 0 || t < 0 {
		return Cursor{}, fmt.Errorf("persistence: bad cursor")
	}
	return Cursor{At: time.UnixMilli(t).UTC(), ID: n}, nil
}

// SearchOrders returns up to limit orders stored in MySQL that match f,
// newest first (created_at DESC, id DESC), starting after cursor (the zero
// Cursor for the first page). next is the cursor of the following page, the
// zero Cursor on the last one. Keyset paging: orders created while a client
// pages appear on no page or on the first, never twice, and none is skipped.
//
// The index each filter walks, in key order (0008_refunds.sql,
// 0009_order_search_index.sql): user → idx_user_created (a user has few
// orders); product and status → idx_product_status_created, product alone
// → idx_product_created: both read only the rows they return; neither →
// idx_created, where a status alone is filtered on the rows walked (a rare
// status reads many: about limit ÷ its share of the orders).
func (s *Store) SearchOrders(ctx context.Context, f OrderFilter, limit int, cursor Cursor) (orders []Order, next Cursor, err error) {
	var where []string
	var args []any
	index := "idx_created"
	switch {
	case f.UserID != 0:
		index = "idx_user_created"
	case f.ProductID != 0 && f.Status != "":
		index = "idx_product_status_created"
	case f.ProductID != 0:
		index = "idx_product_created"
	}
	if f.UserID != 0 {
		where, args = append(where, "user_id = ?"), append(args, f.UserID)
	}
	if f.ProductID != 0 {
		where, args = append(where, "product_id = ?"), append(args, f.ProductID)
	}
	if f.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(f.Status))
	}
	if !f.From.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, f.From.UTC())
	}
	if !f.To.IsZero() {
		where, args = append(where, "created_at < ?"), append(args, f.To.UTC())
	}
	if !cursor.IsZero() {
		where = append(where, "(created_at < ? OR (created_at = ? AND id < ?))")
		args = append(args, cursor.At, cursor.At, cursor.ID)
	}
	q := `SELECT ` + orderCols + ` FROM order_info FORCE INDEX (` + index + `)`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.DB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, Cursor{}, fmt.Errorf("persistence: search orders: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return nil, Cursor{}, fmt.Errorf("persistence: search orders: %w", err)
		}
		orders = append(orders, o)
	}
	if err := rows.Err(); err != nil {
		return nil, Cursor{}, fmt.Errorf("persistence: search orders: %w", err)
	}
	if len(orders) > limit {
		orders = orders[:limit]
		last := orders[limit-1]
		next = Cursor{At: last.CreatedAt, ID: last.ID}
	}
	return orders, next, nil
}

// HistoryEntry is one status an order took, from its outbox events.
type HistoryEntry struct {
	Status order.Status    // the status the event moved the order into
	At     time.Time       // the event's occurredAt (UTC)
	Event  order.EventType // ORDER_CREATED, ORDER_STATUS_CHANGED or ORDER_STATUS_BATCH
	// Version is the order version the change gave (1 for ORDER_CREATED);
	// entries are ordered by it.
	Version int64
}

// historySlack widens the time window in which OrderHistory looks for the
// status batches of an order: an outbox row's created_at is its statement's
// start, which may precede the order row's updated_at by the transaction's
// duration.
const historySlack = 5 * time.Second

// OrderHistory returns the statuses o went through, in version order, read from
// the outbox: its ORDER_CREATED event (PROCESSING), its ORDER_STATUS_CHANGED
// events and the ORDER_STATUS_BATCH events that carry one of its changes (the
// batched order lock's WAITING_PAY, the sweeper's timeout CANCELLED). Batches
// are filed under their first order's orderNo, so the ones of o are looked
// for among the batches written between o's creation and its last change
// (plus historySlack). Pay-timeout messages carry no status and are left
// out. Events purged after the outbox retention (the sweeper's
// OutboxRetention, default 7 days) are missing from the history; o's current
// status is always o.Status.
func (s *Store) OrderHistory(ctx context.Context, o Order) ([]HistoryEntry, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT event_type, payload FROM mq_outbox FORCE INDEX (idx_outbox_order) WHERE order_no = ?
		UNION ALL
		SELECT event_type, payload FROM mq_outbox FORCE INDEX (idx_outbox_type_created)
		WHERE event_type = ? AND created_at BETWEEN ? AND ? AND order_no <> ? AND payload LIKE ?`,
		o.OrderNo, string(order.EventStatusBatch), o.CreatedAt.Add(-historySlack), o.UpdatedAt.Add(historySlack), o.OrderNo,
		`%"orderNo":"`+o.OrderNo+`"%`) // orderNos are digits: nothing to escape
	if err != nil {
		return nil, fmt.Errorf("persistence: order history %s: %w", o.OrderNo, err)
	}
	defer rows.Close()
	var out []HistoryEntry
	versions := map[int64]bool{}
	for rows.Next() {
		var et string
		var payload []byte
		if err := rows.Scan(&et, &payload); err != nil {
			return nil, fmt.Errorf("persistence: order history %s: %w", o.OrderNo, err)
		}
		var e order.Event
		if err := json.Unmarshal(payload, &e); err != nil {
			return nil, fmt.Errorf("persistence: order history %s: event payload: %w", o.OrderNo, err)
		}
		if order.EventType(et) == order.EventStatusBatch {
			found := false
			for _, x := range e.Events {
				if x.OrderNo == o.OrderNo {
					e, found = x, true
					break
				}
			}
			if !found {
				continue
			}
		}
		if e.Status == "" || versions[e.Version] { // a pay-timeout message; or one change twice
			continue
		}
		versions[e.Version] = true
		out = append(out, HistoryEntry{Status: e.Status, At: e.OccurredAt.UTC(), Event: order.EventType(et), Version: e.Version})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("persistence: order history %s: %w", o.OrderNo, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}
