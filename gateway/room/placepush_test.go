package room

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/push"
)

// oneTicket is the push hub's ticket book of this test: every user holds the
// ticket id at place in every product (the binary reads Redis).
type oneTicket struct {
	id    string
	place int64
}

func (o oneTicket) Ticket(context.Context, int64, int64) (push.LinePlace, error) {
	return push.LinePlace{Ticket: o.id, Place: o.place}, nil
}

func (o oneTicket) Places(_ context.Context, _ int64, users []int64) (map[int64]int64, error) {
	out := map[int64]int64{}
	for _, u := range users {
		out[u] = o.place
	}
	return out, nil
}

// noOrders is a push.Snapshotter without orders (this test follows lines only).
type noOrders struct{}

func (noOrders) OrderSnapshot(context.Context, int64, string) (push.Snapshot, error) {
	return push.Snapshot{}, push.ErrNotFound
}
func (noOrders) RecentOrders(context.Context, int64, int) ([]push.Snapshot, error) { return nil, nil }

// pushQueueMessage runs a push hub whose line of productID is st, follows it
// over a real WebSocket as a user holding ticket at place, and returns the
// first queue message the hub sends (decoded).
func pushQueueMessage(t *testing.T, st push.LineState, ticket string, place int64) map[string]any {
	t.Helper()
	secret := []byte("place-push-test-secret-0123456789abcdef")
	h, err := push.New(push.Config{Lines: oneTicket{ticket, place}, HandshakeUserRate: -1, HandshakeAddrRate: -1,
		ProductThrottle: time.Millisecond}, auth.NewVerifier(secret), noOrders{}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("push Serve: %v", err)
		}
	}()
	h.PublishLine(st)
	tok, err := auth.Issue(secret, 41, false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	ws, _, err := websocket.Dial(dctx, "ws://"+ln.Addr().String()+"/ws", &websocket.DialOptions{Subprotocols: []string{push.Subprotocol, tok}})
	if err != nil {
		t.Fatalf("dial push: %v", err)
	}
	defer ws.CloseNow()
	sub, _ := json.Marshal(map[string]any{"type": "queue", "productId": st.ProductID})
	if err := ws.Write(dctx, websocket.MessageText, sub); err != nil {
		t.Fatal(err)
	}
	for {
		_, data, err := ws.Read(dctx)
		if err != nil {
			t.Fatalf("no queue message from push for %+v: %v", st, err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		if m["type"] == "queue" || m["type"] == "error" {
			return m
		}
	}
}

// The queue answer (appendPlace) and the message push actually sends
// (push/line.go, through a running hub and a WebSocket) for the same line
// and ticket agree on every field they both carry; SOLD_OUT in particular
// has no ETA on either (the queue answer said etaSeconds 1 before issue 27
// while push said null). The state is given once: a line admitted up to
// upTo at rate per second, a ticket at place; the queue answer's Position
// is place - upTo (tickets ahead, this one included), as lua/room_place.lua
// computes it and push/line.go does.
func TestPlaceJSONMatchesPushMessage(t *testing.T) {
	const ticket = "0000000000000009"
	deadline := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
	for i, tc := range []struct {
		mode    lua.RoomMode
		state   lua.PlaceState
		upTo    int64
		place   int64
		rate    float64
		soldOut bool
	}{
		{lua.ModeFIFO, lua.PlaceWaiting, 10, 15, 2, false},
		{lua.ModeFIFO, lua.PlaceWaiting, 10, 15, 0, false},
		{lua.ModeFIFO, lua.PlaceSoldOut, 10, 15, 2, true},
		{lua.ModeFIFO, lua.PlaceSoldOut, 10, 15, 0, true},
		{lua.ModeFIFO, lua.PlaceAdmitted, 20, 15, 2, false},
		{lua.ModeDraw, lua.PlaceWaiting, 10, 15, 2, false},
	} {
		pid := int64(100 + i)
		place := lua.Place{Ticket: ticket, State: tc.state, Mode: tc.mode, Rate: tc.rate}
		if tc.state == lua.PlaceAdmitted {
			place.Deadline = deadline
		} else {
			place.Position = tc.place - tc.upTo
		}
		var ours map[string]any
		if err := json.Unmarshal(appendPlace(nil, pid, place), &ours); err != nil {
			t.Fatal(err)
		}
		st := push.LineState{ProductID: pid, Mode: string(tc.mode), Closed: true, Shuffled: true, UpTo: tc.upTo, Rate: tc.rate, SoldOut: tc.soldOut}
		if tc.mode == lua.ModeDraw {
			st.Cutoff = 100
		}
		theirs := pushQueueMessage(t, st, ticket, tc.place)
		shared := 0
		for k, v := range theirs {
			if k == "type" || k == "seq" {
				continue // push's envelope
			}
			ov, ok := ours[k]
			if !ok {
				continue
			}
			shared++
			if fmt.Sprint(ov) != fmt.Sprint(v) {
				t.Errorf("%s %s (upTo %d, place %d, rate %v): %s is %v in the queue answer, %v on push\n queue %v\n push  %v",
					tc.mode, tc.state, tc.upTo, tc.place, tc.rate, k, ov, v, ours, theirs)
			}
		}
		if theirs["state"] != string(tc.state) || shared < 6 {
			t.Errorf("%s %s: push sent %v (%d fields shared with %v)", tc.mode, tc.state, theirs, shared, ours)
		}
	}
}
