package intake

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
)

// Synchronous intake (Config.SyncIntake, STAMPEDE_INTAKE=sync): the source
// article's design, kept as a supported mode for small shops and as the
// benchmark's baseline. reserve.lua runs as in stream mode (idempotency,
// sale window, stock, per-user limit) but does not append to the intake
// stream; the gateway then writes order_info, order_item and the
// ORDER_CREATED outbox row in one MySQL transaction within the request
// (persistence.Store.InsertReservations, through Deps.PersistSync) and answers 202 only after the
// commit. The relay, consumers and sweeper work as in stream mode.
//
// When the transaction fails (or its answer is lost) the request answers 503
// and the reservation is appended to the shard's intake stream, exactly as
// stream mode would have: the writers store it once MySQL answers again
// (unique order_no makes a commit whose answer was lost harmless). So an
// orderNo a concurrent replay already answered always becomes an order, and
// nothing stays half-reserved. Releasing the units and forgetting the request
// instead would race with such replays: one would answer an orderNo that
// never exists while the next request reserves a second one. Sync mode
// therefore still needs a writer role somewhere, for these fallbacks.

// persistSync writes one accepted reservation to MySQL (Deps.PersistSync:
// the order path holds no MySQL code of its own); nil means committed.
func (s *Intake) persistSync(r order.Reservation) error {
	err := s.persist(r)
	if err != nil {
		s.enqueue(r)
	}
	return err
}

// enqueue appends r to its shard's intake stream, as reserve.lua does in
// stream mode.
func (s *Intake) enqueue(r order.Reservation) {
	k := lua.ShardKeys(r.ProductID, r.Shard)
	err := s.redisCall(func(ctx context.Context) error {
		return s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Intake(), Values: lua.ReservationValues(r)}).Err()
	})
	if err != nil {
		s.log.Error("sync intake: reservation neither written nor queued; the reconcile will report its units as drift",
			"orderNo", r.OrderNo, "err", err)
	}
}
