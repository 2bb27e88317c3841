package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/push"
)

// roomTickets reads waiting-room tickets for the push hub (push.LineReader).
type roomTickets struct{ rdb redis.UniversalClient }

// Ticket returns userID's last ticket for productID, 0 if none.
func (r roomTickets) Ticket(ctx context.Context, userID, productID int64) (int64, error) {
	rec, err := r.rdb.HGet(ctx, lua.Room(productID).Tickets(), strconv.FormatInt(userID, 10)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	tk, _, _ := strings.Cut(rec, " ")
	n, _ := strconv.ParseInt(tk, 10, 64)
	return n, nil
}

// feedLines reads the waiting room of every one-shard product each period
// and hands the lines that are on to the hub, which sends each following
// socket its new place (push/line.go). The period is the messages' throttle
// and bounds how late the waiting learn of a sell-out. Returns when ctx ends.
// Failures back off and log as everyPeriod says (loop "push_lines").
func feedLines(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, hub *push.Hub, period time.Duration,
	log *slog.Logger, m *pipeline.Metrics) error {
	return everyPeriod(ctx, store, period, 2*time.Second, feedFailures("push_lines", "push: waiting-room feed", log, m, period),
		func(p persistence.Product) error {
			if p.Shards > 1 {
				return nil
			}
			st, err := lua.ReadRoom(ctx, rdb, p.ID)
			switch {
			case errors.Is(err, lua.ErrStockCorrupt):
				return nil // this product's data: the others go on
			case err != nil:
				return fmt.Errorf("redis: room of product %d: %w", p.ID, err)
			case !st.On:
				return nil
			}
			hub.PublishLine(push.LineState{ProductID: p.ID, UpTo: st.UpTo, Rate: st.Rate, SoldOut: st.Available <= 0})
			return nil
		})
}
