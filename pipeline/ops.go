package pipeline

import (
	"context"
	"time"

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
	// PayTimeout is the consumers' pay timeout (Pulse's lock latency).
	PayTimeout time.Duration
}

// Pulse is ReadPulse of the given products (unknown ids are skipped).
func (o Ops) Pulse(ctx context.Context, productIDs []int64, window time.Duration) (any, error) {
	all, err := o.Store.ListProducts(ctx)
	if err != nil {
		return nil, err
	}
	want := make(map[int64]bool, len(productIDs))
	for _, id := range productIDs {
		want[id] = true
	}
	var ps []persistence.Product
	for _, p := range all {
		if want[p.ID] {
			ps = append(ps, p)
		}
	}
	return ReadPulse(ctx, o.Redis, o.Store, o.Conn, PulseConfig{Products: ps, PayTimeout: o.PayTimeout, Window: window})
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
