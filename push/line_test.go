package push

import (
	"context"
	"testing"
	"time"
)

// memTickets is the test's ticket book (the binary reads Redis).
type memTickets map[[2]int64]int64

func (m memTickets) Ticket(_ context.Context, userID, productID int64) (int64, error) {
	return m[[2]int64{userID, productID}], nil
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

	h.PublishLine(LineState{ProductID: pid, UpTo: 0, Rate: 2})
	a.send(map[string]any{"type": "queue", "productId": pid})
	if m := a.nextQueue(2 * time.Second); m.State != "WAITING" || m.Ticket != 5 || m.Position != 5 || m.EtaSeconds == nil || *m.EtaSeconds != 3 {
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
	h.PublishLine(LineState{ProductID: pid, UpTo: 2, Rate: 2})
	if m := a.nextQueue(2 * time.Second); m.State != "WAITING" || m.Position != 3 {
		t.Fatalf("a after two admissions: %+v", m)
	}
	time.Sleep(10 * time.Millisecond)
	h.PublishLine(LineState{ProductID: pid, UpTo: 5, Rate: 2})
	if m := a.nextQueue(2 * time.Second); m.State != "ADMITTED" || m.Position != 0 {
		t.Fatalf("a's turn: %+v", m)
	}
	// Many quick steps: b's messages come in order.
	for upto := int64(6); upto <= 200; upto++ {
		h.PublishLine(LineState{ProductID: pid, UpTo: upto, Rate: 50})
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
	h.PublishLine(LineState{ProductID: pid, UpTo: 200, Rate: 50, SoldOut: true})
	if m := b.nextQueue(2 * time.Second); m.State != "SOLD_OUT" || m.Position != 100 {
		t.Fatalf("b at the sell-out: %+v", m)
	}
	time.Sleep(10 * time.Millisecond)
	h.PublishLine(LineState{ProductID: pid, UpTo: 201, Rate: 50})
	if m := b.nextQueue(2 * time.Second); m.State != "WAITING" || !m.BackInStock || m.Position != 99 {
		t.Fatalf("b back in stock: %+v", m)
	}
	a.quiet(100 * time.Millisecond) // admitted: no more line messages
	c.quiet(10 * time.Millisecond)
}
