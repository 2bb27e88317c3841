package push

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// memTickets is the test's ticket book (the binary reads Redis): places by
// (user, product); a place of -1 is a ticket not placed yet.
type memTickets map[[2]int64]int64

func tid(place int64) string { return fmt.Sprintf("%016x", place+1000) }

func (m memTickets) Ticket(_ context.Context, userID, productID int64) (LinePlace, error) {
	p, ok := m[[2]int64{userID, productID}]
	if !ok {
		return LinePlace{}, nil
	}
	return LinePlace{Ticket: tid(int64(userID)), Place: max(p, 0)}, nil
}

func (m memTickets) Places(_ context.Context, productID int64, userIDs []int64) (map[int64]int64, error) {
	out := map[int64]int64{}
	for _, u := range userIDs {
		if p := m[[2]int64{u, productID}]; p > 0 {
			out[u] = p
		}
	}
	return out, nil
}

func (c *client) nextQueue(d time.Duration) msg {
	c.t.Helper()
	for {
		if m := c.next(d); m.Type == "queue" || m.Type == "error" {
			return m
		}
	}
}

// A socket following a line gets its place on subscribing and on every
// change, in order (seq grows, the position only falls), "your turn" once,
// and "sold out" / "back in stock"; a user without a ticket gets NO_TICKET.
func TestLineMessagesInOrder(t *testing.T) {
	const pid = 7
	cfg := Config{Lines: memTickets{{1, pid}: 5, {2, pid}: 300}, ProductThrottle: 5 * time.Millisecond}
	h := startHub(t, cfg, newMemSnapshots(), "", nil)
	a := dial(t, h.url, token(t, 1), dialOpts{})
	b := dial(t, h.url, token(t, 2), dialOpts{})
	c := dial(t, h.url, token(t, 3), dialOpts{})

	h.PublishLine(LineState{ProductID: pid, Closed: true, Shuffled: true, UpTo: 0, Rate: 2})
	a.send(map[string]any{"type": "queue", "productId": pid})
	if m := a.nextQueue(2 * time.Second); m.State != "WAITING" || m.Ticket != tid(1) || m.Mode != "fifo" || m.Position != 5 || m.EtaSeconds == nil || *m.EtaSeconds != 3 {
		t.Fatalf("first place of a: %+v", m)
	}
	b.send(map[string]any{"type": "queue", "productId": pid})
	if m := b.nextQueue(2 * time.Second); m.State != "WAITING" || m.Position != 300 {
		t.Fatalf("first place of b: %+v", m)
	}
	c.send(map[string]any{"type": "queue", "productId": pid})
	if m := c.nextQueue(2 * time.Second); m.Type != "error" || m.Code != codeNoTicket {
		t.Fatalf("user without a ticket: %+v", m)
	}

	time.Sleep(10 * time.Millisecond) // past the throttle window
	h.PublishLine(LineState{ProductID: pid, Closed: true, Shuffled: true, UpTo: 2, Rate: 2})
	if m := a.nextQueue(2 * time.Second); m.State != "WAITING" || m.Position != 3 {
		t.Fatalf("a after two admissions: %+v", m)
	}
	time.Sleep(10 * time.Millisecond)
	h.PublishLine(LineState{ProductID: pid, Closed: true, Shuffled: true, UpTo: 5, Rate: 2})
	if m := a.nextQueue(2 * time.Second); m.State != "ADMITTED" || m.Position != 0 {
		t.Fatalf("a's turn: %+v", m)
	}
	// Many quick steps: b's messages come in order.
	for upto := int64(6); upto <= 200; upto++ {
		h.PublishLine(LineState{ProductID: pid, Closed: true, Shuffled: true, UpTo: upto, Rate: 50})
		if upto%20 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	var seq uint64
	pos := int64(300)
	for pos > 100 {
		m := b.nextQueue(2 * time.Second)
		if m.State != "WAITING" || m.Seq <= seq || m.Position >= pos {
			t.Fatalf("b out of order: %+v after seq %d position %d", m, seq, pos)
		}
		seq, pos = m.Seq, m.Position
	}
	time.Sleep(10 * time.Millisecond)
	h.PublishLine(LineState{ProductID: pid, Closed: true, Shuffled: true, UpTo: 200, Rate: 50, SoldOut: true})
	if m := b.nextQueue(2 * time.Second); m.State != "SOLD_OUT" || m.Position != 100 {
		t.Fatalf("b at the sell-out: %+v", m)
	}
	time.Sleep(10 * time.Millisecond)
	h.PublishLine(LineState{ProductID: pid, Closed: true, Shuffled: true, UpTo: 201, Rate: 50})
	if m := b.nextQueue(2 * time.Second); m.State != "WAITING" || !m.BackInStock || m.Position != 99 {
		t.Fatalf("b back in stock: %+v", m)
	}
	a.quiet(100 * time.Millisecond) // admitted: no more line messages
	c.quiet(10 * time.Millisecond)
}

// A pre-queue over push: before the opening a follower is PRE_QUEUE without
// a position, SHUFFLING once the opening passed, and gets its position as
// soon as the shuffle is published (the hub reads the places itself); a
// draw's entry beyond the cutoff is told LOST at once.
func TestLinePreQueueAndDraw(t *testing.T) {
	const pid = 8
	book := &lockedTickets{m: memTickets{{1, pid}: -1, {2, pid}: -1, {3, pid}: -1}}
	cfg := Config{Lines: book, ProductThrottle: 5 * time.Millisecond}
	h := startHub(t, cfg, newMemSnapshots(), "", nil)
	socks := map[int64]*client{}
	for u := int64(1); u <= 3; u++ {
		socks[u] = dial(t, h.url, token(t, u), dialOpts{})
	}
	h.PublishLine(LineState{ProductID: pid, Mode: "draw"})
	for u := int64(1); u <= 3; u++ {
		socks[u].send(map[string]any{"type": "queue", "productId": pid})
		if m := socks[u].nextQueue(2 * time.Second); m.State != "PRE_QUEUE" || m.Position != 0 || m.Mode != "draw" {
			t.Fatalf("user %d before the close: %+v", u, m)
		}
	}
	time.Sleep(10 * time.Millisecond)
	h.PublishLine(LineState{ProductID: pid, Mode: "draw", Closed: true})
	for u := int64(1); u <= 3; u++ {
		if m := socks[u].nextQueue(2 * time.Second); m.State != "SHUFFLING" {
			t.Fatalf("user %d at the close: %+v", u, m)
		}
	}
	// The shuffle: user 3 first, user 1 second (reserve), user 2 third (lost).
	book.set(memTickets{{3, pid}: 1, {1, pid}: 2, {2, pid}: 3})
	time.Sleep(10 * time.Millisecond)
	h.PublishLine(LineState{ProductID: pid, Mode: "draw", Closed: true, Shuffled: true, UpTo: 1, Cutoff: 2})
	want := map[int64]string{3: "ADMITTED", 1: "WAITING", 2: "LOST"}
	for u, st := range want {
		m := socks[u].nextQueue(2 * time.Second)
		if m.State != st || (st == "WAITING" && m.Position != 1) {
			t.Fatalf("user %d after the draw: %+v, want %s", u, m, st)
		}
	}
	socks[2].quiet(50 * time.Millisecond) // LOST ends the subscription
}

// A random room: followers wait without a position and are told ADMITTED by
// PublishAdmitted.
func TestLineRandomAdmitted(t *testing.T) {
	const pid = 9
	cfg := Config{Lines: memTickets{{1, pid}: -1, {2, pid}: -1}, ProductThrottle: 5 * time.Millisecond}
	h := startHub(t, cfg, newMemSnapshots(), "", nil)
	a := dial(t, h.url, token(t, 1), dialOpts{})
	b := dial(t, h.url, token(t, 2), dialOpts{})
	h.PublishLine(LineState{ProductID: pid, Mode: "random", Closed: true, Shuffled: true})
	for _, c := range []*client{a, b} {
		c.send(map[string]any{"type": "queue", "productId": pid})
		if m := c.nextQueue(2 * time.Second); m.State != "WAITING" || m.Position != 0 || m.Mode != "random" {
			t.Fatalf("random room follower: %+v", m)
		}
	}
	h.PublishAdmitted(pid, []int64{2})
	if m := b.nextQueue(2 * time.Second); m.State != "ADMITTED" {
		t.Fatalf("admitted follower: %+v", m)
	}
	a.quiet(50 * time.Millisecond)
}

// lockedTickets is a memTickets the test changes while the hub reads it.
type lockedTickets struct {
	mu sync.Mutex
	m  memTickets
}

func (l *lockedTickets) set(m memTickets) { l.mu.Lock(); l.m = m; l.mu.Unlock() }

func (l *lockedTickets) Ticket(ctx context.Context, userID, productID int64) (LinePlace, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.Ticket(ctx, userID, productID)
}

func (l *lockedTickets) Places(ctx context.Context, productID int64, userIDs []int64) (map[int64]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.Places(ctx, productID, userIDs)
}

// lineGot is a queue message to socket i of TestLineReachesEverySocket.
type lineGot struct {
	i int
	m msg
}

// A move of the line reaches every one of many sockets, each with its own
// place (ticket − upTo), once per move; sockets whose turn came get
// ADMITTED once and no later moves.
func TestLineReachesEverySocket(t *testing.T) {
	t.Parallel()
	const (
		pid   = 9
		n     = 600 // both ends in this process, under the race detector's goroutine limit
		first = int64(10_000)
	)
	tickets := memTickets{}
	for i := range n {
		tickets[[2]int64{int64(1000 + i), pid}] = first + int64(i)
	}
	h := startHub(t, Config{Lines: tickets, ProductThrottle: time.Millisecond}, newMemSnapshots(), "", nil)
	h.PublishLine(LineState{ProductID: pid, Closed: true, Shuffled: true, UpTo: 0, Rate: 100})

	got := make(chan lineGot, 4*n)
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ws, _, err := websocket.Dial(ctx, h.url, &websocket.DialOptions{Subprotocols: []string{Subprotocol, token(t, int64(1000+i))}})
		cancel()
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		done := make(chan struct{})
		t.Cleanup(func() { ws.CloseNow(); <-done })
		go func() {
			defer close(done)
			for {
				_, b, err := ws.Read(context.Background())
				if err != nil {
					return
				}
				var m msg
				if json.Unmarshal(b, &m) == nil && m.Type == "queue" {
					got <- lineGot{i, m}
				}
			}
		}()
		if err := ws.Write(context.Background(), websocket.MessageText, []byte(`{"type":"queue","productId":9}`)); err != nil {
			t.Fatal(err)
		}
	}

	// expect takes one message for each of the sockets from..n-1: its place
	// after a move to upTo. Then no socket gets anything more.
	expect := func(upTo int64, from int, what string) {
		t.Helper()
		seen := make([]bool, n)
		for left := n - from; left > 0; left-- {
			select {
			case g := <-got:
				ticket := first + int64(g.i)
				state, pos := "WAITING", ticket-upTo
				if ticket <= upTo {
					state, pos = "ADMITTED", 0
				}
				if g.i < from || seen[g.i] || g.m.Ticket != tid(int64(1000+g.i)) || g.m.State != state || g.m.Position != pos {
					t.Fatalf("%s: socket %d (ticket %d) got %+v (seen before: %v); want %s at %d", what, g.i, ticket, g.m, seen[g.i], state, pos)
				}
				seen[g.i] = true
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: %d of %d sockets got no place", what, left, n-from)
			}
		}
		select {
		case g := <-got:
			t.Fatalf("%s: another message to socket %d: %+v", what, g.i, g.m)
		case <-time.After(20 * time.Millisecond):
		}
	}
	expect(0, 0, "subscribe")
	for _, upTo := range []int64{500, 5_000, 9_999} {
		h.PublishLine(LineState{ProductID: pid, Closed: true, Shuffled: true, UpTo: upTo, Rate: 100})
		expect(upTo, 0, fmt.Sprintf("move to %d", upTo))
	}
	// The turn of the first half comes; then the line moves once more for
	// the other half only.
	upTo := first + n/2 - 1
	h.PublishLine(LineState{ProductID: pid, Closed: true, Shuffled: true, UpTo: upTo, Rate: 100})
	expect(upTo, 0, "admission of half")
	h.PublishLine(LineState{ProductID: pid, Closed: true, Shuffled: true, UpTo: upTo + 1, Rate: 100})
	expect(upTo+1, n/2, "move after the admission")
}
