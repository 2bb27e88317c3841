package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
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
func feedLines(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, hub *push.Hub, period time.Duration) error {
	return everyPeriod(ctx, store, period, 2*time.Second, func(p persistence.Product) {
		if p.Shards > 1 {
			return
		}
		st, err := lua.ReadRoom(ctx, rdb, p.ID)
		if err != nil || !st.On {
			return
		}
		hub.PublishLine(push.LineState{ProductID: p.ID, UpTo: st.UpTo, Rate: st.Rate, SoldOut: st.Available <= 0})
	})
}
