package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/order"
)

// The records reserve.lua writes, and their codecs: the intake stream entry
// (a reservation), the pending order hash (the same fields, read while MySQL
// does not have the order yet) and the idempotency record.

// Field names of an intake stream entry and of a pending order hash
// (Keys.Order; that hash has every field but FieldOrderNo, which is in its
// key), written by reserve.lua.
const (
	FieldOrderNo   = "o"
	FieldUser      = "u"
	FieldRequest   = "r"
	FieldQuantity  = "q"
	FieldUnitPrice = "pr"
	FieldAccepted  = "t" // unix milliseconds, Redis server clock
)

// ParseReservation decodes an intake stream entry. productId and shard come
// from the orderNo.
func ParseReservation(values map[string]any) (order.Reservation, error) {
	str := func(k string) string { s, _ := values[k].(string); return s }
	var r order.Reservation
	var err error
	r.OrderNo = str(FieldOrderNo)
	if _, r.Shard, r.ProductID, err = order.ParseNo(r.OrderNo); err != nil {
		return order.Reservation{}, err
	}
	r.RequestID = str(FieldRequest)
	if r.UserID, err = strconv.ParseInt(str(FieldUser), 10, 64); err != nil {
		return order.Reservation{}, fmt.Errorf("lua: reservation %s: user: %w", r.OrderNo, err)
	}
	if r.Quantity, err = strconv.ParseInt(str(FieldQuantity), 10, 64); err != nil || r.Quantity <= 0 {
		return order.Reservation{}, fmt.Errorf("lua: reservation %s: bad quantity", r.OrderNo)
	}
	if r.UnitPrice, err = strconv.ParseInt(str(FieldUnitPrice), 10, 64); err != nil {
		return order.Reservation{}, fmt.Errorf("lua: reservation %s: price: %w", r.OrderNo, err)
	}
	ms, err := strconv.ParseInt(str(FieldAccepted), 10, 64)
	if err != nil {
		return order.Reservation{}, fmt.Errorf("lua: reservation %s: accepted: %w", r.OrderNo, err)
	}
	r.AcceptedAt = time.UnixMilli(ms).UTC()
	if r.RequestID == "" {
		return order.Reservation{}, fmt.Errorf("lua: reservation %s: no requestId", r.OrderNo)
	}
	return r, nil
}

// ReservationValues are the XADD field-value pairs of r's intake stream
// entry, as reserve.lua writes them in stream mode.
func ReservationValues(r order.Reservation) []any {
	return []any{
		FieldOrderNo, r.OrderNo, FieldUser, r.UserID, FieldRequest, r.RequestID,
		FieldQuantity, r.Quantity, FieldUnitPrice, r.UnitPrice, FieldAccepted, r.AcceptedAt.UnixMilli(),
	}
}

// PendingOrder is the pending order record (Keys.Order) reserve.lua keeps for
// an accepted order until the writers have stored it in MySQL.
type PendingOrder struct {
	OrderNo    string
	UserID     int64
	RequestID  string
	Quantity   int64
	UnitPrice  int64 // minor units
	AcceptedMs int64 // unix milliseconds, Redis server clock
}

// ErrNoRecord: the pending order record does not exist (or lacks a field:
// a partial record is treated as none).
var ErrNoRecord = errors.New("lua: no pending order record")

// pendingFields are the hash fields ReadPendingOrder reads, in
// ParsePendingOrder's order.
var pendingFields = []string{FieldUser, FieldRequest, FieldQuantity, FieldUnitPrice, FieldAccepted}

// ReadPendingOrder reads orderNo's pending order record in shard k: one
// HMGET. ErrNoRecord when there is none; a *CorruptError when a numeric field
// is not an integer; any other error is Redis's.
func ReadPendingOrder(ctx context.Context, rdb redis.Cmdable, k Keys, orderNo string) (PendingOrder, error) {
	return readPendingOrder(ctx, rdb, k.Order(orderNo), orderNo)
}

func readPendingOrder(ctx context.Context, rdb redis.Cmdable, key, orderNo string) (PendingOrder, error) {
	vals, err := rdb.HMGet(ctx, key, pendingFields...).Result()
	if err != nil {
		return PendingOrder{}, err
	}
	return ParsePendingOrder(key, orderNo, vals)
}

// ParsePendingOrder decodes the HMGET answer of the fields u, r, q, pr, t of
// the record at key (for errors) of orderNo.
func ParsePendingOrder(key, orderNo string, vals []any) (PendingOrder, error) {
	if len(vals) != len(pendingFields) {
		return PendingOrder{}, fmt.Errorf("lua: pending order %s: want %d fields, got %d", orderNo, len(pendingFields), len(vals))
	}
	var str [5]string
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			return PendingOrder{}, ErrNoRecord
		}
		str[i] = s
	}
	p := PendingOrder{OrderNo: orderNo, RequestID: str[1]}
	for i, dst := range [...]*int64{0: &p.UserID, 2: &p.Quantity, 3: &p.UnitPrice, 4: &p.AcceptedMs} {
		if dst == nil {
			continue
		}
		n, err := strconv.ParseInt(str[i], 10, 64)
		if err != nil {
			return PendingOrder{}, &CorruptError{Key: key, Detail: "field " + pendingFields[i] + ": " + err.Error()}
		}
		*dst = n
	}
	return p, nil
}

// RequestRecord is the idempotency record of (user, product, requestId)
// (Keys.Request): "<orderNo> <quantity>", later "<orderNo> <quantity>
// <status>" (SetStatus).
type RequestRecord struct {
	OrderNo  string
	Quantity string // decimal, as the request sent it
	Status   string // "" until the pipeline reported one (PROCESSING)
}

// ParseRequestRecord decodes an idempotency record; ok is false for a value
// that is not one.
func ParseRequestRecord(v string) (r RequestRecord, ok bool) {
	no, rest, ok := strings.Cut(v, " ")
	if !ok {
		return RequestRecord{}, false
	}
	q, st, _ := strings.Cut(rest, " ")
	return RequestRecord{OrderNo: no, Quantity: q, Status: st}, true
}
