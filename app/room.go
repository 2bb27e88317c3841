package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/push"
)

// roomTickets reads waiting-room tickets for the push hub (push.LineReader).
type roomTickets struct{ rdb redis.UniversalClient }

// Ticket returns userID's last ticket for productID (Ticket "" if none).
func (r roomTickets) Ticket(ctx context.Context, userID, productID int64) (push.LinePlace, error) {
	m, err := lua.ReadTickets(ctx, r.rdb, productID, []int64{userID})
	if err != nil {
		return push.LinePlace{}, err
	}
	tr, ok := m[userID]
	if !ok {
		return push.LinePlace{}, nil
	}
	return push.LinePlace{Ticket: tr.Ticket, Place: tr.Place}, nil
}

// Places returns the places of userIDs' tickets, 1,000 users per HMGET.
func (r roomTickets) Places(ctx context.Context, productID int64, userIDs []int64) (map[int64]int64, error) {
	out := make(map[int64]int64, len(userIDs))
	for len(userIDs) > 0 {
		n := min(len(userIDs), 1000)
		m, err := lua.ReadTickets(ctx, r.rdb, productID, userIDs[:n])
		if err != nil {
			return out, err
		}
		for u, tr := range m {
			out[u] = tr.Place
		}
		userIDs = userIDs[n:]
	}
	return out, nil
}

// feedLines reads the waiting room of every product each period and hands
// the lines that are on to the hub, which sends each following socket its
// new place (push/line.go); for a random room it also hands over the buyers
// admitted since the last read (lua's room log). The period is the messages'
// throttle and bounds how late the waiting learn of a sell-out. Returns when
// ctx ends. Failures back off and log as everyPeriod says (loop "push_lines").
func feedLines(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, hub *push.Hub, period time.Duration,
	log *slog.Logger, m *pipeline.Metrics) error {
	logs := map[int64]string{} // product → last room-log entry handed over
	return everyPeriod(ctx, store, period, 2*time.Second, feedFailures("push_lines", "push: waiting-room feed", log, m, period),
		func(p persistence.Product) error {
			st, err := lua.ReadRoom(ctx, rdb, p.ID)
			switch {
			case errors.Is(err, lua.ErrStockCorrupt):
				return nil // this product's data: the others go on
			case err != nil:
				return fmt.Errorf("redis: room of product %d: %w", p.ID, err)
			case !st.On:
				return nil
			}
			hub.PublishLine(push.LineState{ProductID: p.ID, Mode: string(st.Mode), Closed: st.Closed, Shuffled: st.Shuffled,
				UpTo: st.UpTo, Cutoff: st.Cutoff, Rate: st.Rate, SoldOut: st.Available <= 0})
			if st.Mode != lua.ModeRandom {
				return nil
			}
			return feedRoomLog(ctx, rdb, hub, p.ID, logs)
		})
}

// feedRoomLog hands the hub a random room's admissions logged since the last
// call (logs keeps the last entry per product; the first call starts from the
// newest: followers admitted before learn it from their ticket on subscribing).
func feedRoomLog(ctx context.Context, rdb redis.UniversalClient, hub *push.Hub, productID int64, logs map[int64]string) error {
	after, ok := logs[productID]
	if !ok {
		var err error
		if after, err = lua.LastRoomLogID(ctx, rdb, productID); err != nil {
			return fmt.Errorf("redis: room log of product %d: %w", productID, err)
		}
	}
	entries, err := lua.ReadRoomLog(ctx, rdb, productID, after, 1000)
	if err != nil {
		return fmt.Errorf("redis: room log of product %d: %w", productID, err)
	}
	for _, e := range entries {
		hub.PublishAdmitted(productID, e.Users)
		after = e.ID
	}
	logs[productID] = after
	return nil
}
