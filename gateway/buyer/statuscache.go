package buyer

import (
	"context"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// statusCache records o's status in its idempotency record (lua.SetStatus)
// after a transition the gateway made (cancel, payment), so that replays of
// its request answer it without MySQL. A failure only leaves replays with
// an older status: it is logged, never answered.
func (s *API) statusCache(o persistence.Order) {
	_, shard, pid, err := order.ParseNo(o.OrderNo)
	if err != nil || o.RequestID == "" {
		return
	}
	err = s.redisCall(func(ctx context.Context) error {
		_, err := lua.SetStatus(ctx, s.rdb, lua.ShardKeys(pid, shard), o.UserID, o.RequestID, o.OrderNo, string(o.Status))
		return err
	})
	if err != nil {
		s.log.Warn("could not record the order status for replays", "orderNo", o.OrderNo, "requestId", o.RequestID,
			"status", string(o.Status), "err", err)
	}
}
