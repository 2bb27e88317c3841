package push_test

import (
	"context"
	"log/slog"
	"os"
	"os/signal"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/push"
)

// snapshots would read order_info; see the push.Snapshotter contract.
type snapshots struct{}

func (snapshots) OrderSnapshot(ctx context.Context, userID int64, orderNo string) (push.Snapshot, error) {
	return push.Snapshot{}, push.ErrNotFound
}

func (snapshots) RecentOrders(ctx context.Context, userID int64, limit int) ([]push.Snapshot, error) {
	return nil, nil
}

// A push instance: sockets on 127.0.0.1:8081/ws, status events from
// RabbitMQ, product stock fed by the caller.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	hub, err := push.New(push.Config{}, auth.NewVerifier([]byte("jwt secret")), snapshots{},
		"amqp://guest:guest@127.0.0.1:5672/", slog.Default())
	if err != nil {
		panic(err)
	}
	go func() {
		// e.g. on every stock change the gateway observes:
		hub.PublishProduct(7, 42, false)
	}()
	if err := hub.Run(ctx); err != nil { // returns after closing every socket with 1001
		slog.Error("push", "err", err)
	}
}
