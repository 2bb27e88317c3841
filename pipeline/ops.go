package pipeline

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/persistence"
)

// Ops bundles the operator actions the gateway's admin endpoints and the
// stampede CLI expose: reconciliation and dead-letter inspection and replay.
// Its methods return JSON-encodable values, so the gateway can serve them
// without importing this package (it declares the interface it needs).
type Ops struct {
	Store *persistence.Store
	Redis redis.UniversalClient
	// Conn is the AMQP connection used for the dead-letter queue.
	Conn *Conn
}

// Reconcile runs Reconcile over every product; ok is the report's OK.
func (o Ops) Reconcile(ctx context.Context) (report any, ok bool, err error) {
	rep, err := Reconcile(ctx, o.Redis, o.Store, nil)
	if err != nil {
		return nil, false, err
	}
	return rep, rep.OK, nil
}

// DLQ is InspectDLQ.
func (o Ops) DLQ(ctx context.Context, limit int) (any, error) {
	return InspectDLQ(ctx, o.Conn, o.Store, limit)
}

// ReplayDLQ is ReplayDLQ.
func (o Ops) ReplayDLQ(ctx context.Context, eventIDs []string, all, dropPoison bool) (any, error) {
	return ReplayDLQ(ctx, o.Conn, o.Store, ReplayRequest{EventIDs: eventIDs, All: all, DropPoison: dropPoison})
}
