package pipeline

import (
	"context"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// Replays are answered from Redis (issue 18): reserve.lua's DUPLICATE branch
// returns the orderNo and the status its idempotency record holds, so the
// gateway never reads MySQL for them. The record learns each new status from
// whoever commits the transition, through CacheStatus: the order-lock
// consumer (WAITING_PAY or FAILED), the order-close consumer and the sweeper
// (CANCELLED), the gateway's cancel and payment handlers (CANCELLED, PAID).
// Until a status arrives a replay says PROCESSING; a lost update only leaves
// replays one status behind (the buyer's page gets the rest over push, and
// GET /api/orders/{orderNo} reads MySQL). Updates never move a record's
// status backwards and never touch a record that now belongs to a later
// intent; the record keeps its TTL.

// CacheStatus records o's status (after its transition committed) in the
// idempotency record of its request. It needs o's OrderNo, UserID,
// RequestID and Status, as persistence returns them from LockStock,
// CloseOrder and Pay. Errors are logged to log (nil: slog.Default()) at warn
// and returned; callers should not fail or retry the message for them.
func CacheStatus(ctx context.Context, rdb redis.Scripter, o persistence.Order, log *slog.Logger) error {
	if o.OrderNo == "" || o.RequestID == "" || !o.Status.Valid() {
		return nil
	}
	_, shard, pid, err := order.ParseNo(o.OrderNo)
	if err != nil {
		return nil
	}
	if _, err := lua.SetStatus(ctx, rdb, lua.ShardKeys(pid, shard), o.UserID, o.RequestID, o.OrderNo, string(o.Status)); err != nil {
		if log == nil {
			log = slog.Default()
		}
		log.Warn("could not record the order status for replays", "orderNo", o.OrderNo, "requestId", o.RequestID,
			"status", string(o.Status), "err", err)
		return err
	}
	return nil
}

// CacheStatuses is CacheStatus for a batch of orders in one Redis pipeline
// (the batched order-lock consumer and the sweeper's close pass).
func CacheStatuses(ctx context.Context, rdb redis.Cmdable, orders []persistence.Order, log *slog.Logger) error {
	updates := make([]lua.StatusUpdate, 0, len(orders))
	for _, o := range orders {
		if o.OrderNo == "" || o.RequestID == "" || !o.Status.Valid() {
			continue
		}
		_, shard, pid, err := order.ParseNo(o.OrderNo)
		if err != nil {
			continue
		}
		updates = append(updates, lua.StatusUpdate{Keys: lua.ShardKeys(pid, shard), UserID: o.UserID, RequestID: o.RequestID,
			OrderNo: o.OrderNo, Status: string(o.Status)})
	}
	if err := lua.SetStatusMany(ctx, rdb, updates); err != nil {
		if log == nil {
			log = slog.Default()
		}
		log.Warn("could not record the order statuses for replays", "orders", len(updates), "err", err)
		return err
	}
	return nil
}
