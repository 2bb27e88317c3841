package push

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
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
