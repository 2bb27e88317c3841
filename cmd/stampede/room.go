package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
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
// ctx ends.
func feedLines(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, hub *push.Hub, period time.Duration) error {
	logs := map[int64]string{} // product → last room-log entry handed over
	return everyPeriod(ctx, store, period, 2*time.Second, func(p persistence.Product) {
		st, err := lua.ReadRoom(ctx, rdb, p.ID)
		if err != nil || !st.On {
			return
		}
		hub.PublishLine(push.LineState{ProductID: p.ID, Mode: string(st.Mode), Closed: st.Closed, Shuffled: st.Shuffled,
			UpTo: st.UpTo, Cutoff: st.Cutoff, Rate: st.Rate, SoldOut: st.Available <= 0})
		if st.Mode != lua.ModeRandom {
			return
		}
		after, ok := logs[p.ID]
		if !ok { // from now on: followers admitted before learn it from their ticket on subscribing
			if after, err = lua.LastRoomLogID(ctx, rdb, p.ID); err != nil {
				return
			}
		}
		entries, err := lua.ReadRoomLog(ctx, rdb, p.ID, after, 1000)
		if err != nil {
			return
		}
		for _, e := range entries {
			hub.PublishAdmitted(p.ID, e.Users)
			after = e.ID
		}
		logs[p.ID] = after
	})
}
