// Throwaway dev harness (not committed): runs a push hub over the MySQL store,
// the way cmd/stampede is expected to wire it.
package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/push"
)

type snapshots struct{ store *persistence.Store }

func toSnapshot(o persistence.Order) push.Snapshot {
	return push.Snapshot{OrderNo: o.OrderNo, UserID: o.UserID, Status: o.Status, Version: o.Version,
		UpdatedAt: o.UpdatedAt, PayDeadline: o.PayDeadline}
}

func (s snapshots) OrderSnapshot(ctx context.Context, userID int64, orderNo string) (push.Snapshot, error) {
	o, err := s.store.GetOrder(ctx, orderNo)
	if errors.Is(err, persistence.ErrNotFound) || (err == nil && o.UserID != userID) {
		return push.Snapshot{}, push.ErrNotFound
	}
	if err != nil {
		return push.Snapshot{}, err
	}
	return toSnapshot(o), nil
}

func (s snapshots) RecentOrders(ctx context.Context, userID int64, limit int) ([]push.Snapshot, error) {
	orders, _, err := s.store.ListOrders(ctx, userID, limit, "")
	if err != nil {
		return nil, err
	}
	out := make([]push.Snapshot, len(orders))
	for i, o := range orders {
		out[i] = toSnapshot(o)
	}
	return out, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	store, err := persistence.Open(ctx, os.Getenv("STAMPEDE_MYSQL_DSN"))
	if err != nil {
		panic(err)
	}
	secret := os.Getenv("STAMPEDE_JWT_SECRET")
	if secret == "" {
		secret = "stampede-dev-jwt-secret-change-me"
	}
	hub, err := push.New(push.Config{Addr: os.Getenv("PUSH_ADDR")}, auth.NewVerifier([]byte(secret)), snapshots{store}, os.Getenv("STAMPEDE_AMQP_URL"), log)
	if err != nil {
		panic(err)
	}
	if err := hub.Run(ctx); err != nil {
		panic(err)
	}
}
