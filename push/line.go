package push

import (
	"context"
	"math"
	"sync"
	"time"
)

// The waiting room over push. A buyer who took a place in a product's
// waiting room (POST /api/products/{id}/queue) sends {"type":"queue",
// "productId"} on its socket; the hub looks up the user's ticket (through
// Config.Lines, never trusting a ticket the client names) and from then on
// sends the socket
//
//	{"type":"queue","productId","ticket","state","position","etaSeconds","seq","backInStock"}
//
// whenever the socket's state or position changes: state
// WAITING (position = tickets still ahead, including this one), ADMITTED
// ("your turn": the last message of the subscription), or SOLD_OUT (nothing
// left: everyone still waiting gets it at the first PublishLine after the
// sell-out; backInStock marks the WAITING that follows if released units
// let the line move again). Lines are throttled like product messages: at
// most one send per product per Config.ProductThrottle, a state published
// inside the window waits for its end and the latest one wins. seq grows with every PublishLine of the product, so a
// client can drop a message older than one it has (the queue of one socket
// never reorders, and the hub never queues a lower seq after a higher one).

// LineState is one product's waiting-room line as the pacer left it.
type LineState struct {
	ProductID int64
	UpTo      int64   // tickets up to this one were admitted
	Rate      float64 // admissions per second of the pacer's last step (0: unknown)
	SoldOut   bool    // nothing is left to buy
}

// A LineReader finds a user's ticket in a product's waiting room; the main
// package implements it over package lua.
type LineReader interface {
	// Ticket returns the user's last ticket for the product (0: none).
	Ticket(ctx context.Context, userID, productID int64) (int64, error)
}

// Error code of a queue subscription without a ticket.
const codeNoTicket = "NO_TICKET"

// queueMessage is the server's waiting-room message.
type queueMessage struct {
	Type        string `json:"type"` // "queue"
	ProductID   int64  `json:"productId"`
	Ticket      int64  `json:"ticket"`
	State       string `json:"state"`
	Position    int64  `json:"position"`
	EtaSeconds  *int64 `json:"etaSeconds"`
	Seq         uint64 `json:"seq"`
	BackInStock bool   `json:"backInStock,omitempty"`
}

// lineBook holds the last state of every line and the sockets following it.
type lineBook struct {
	mu      sync.Mutex
	states  map[int64]LineState // last sent
	seqs    map[int64]uint64
	subs    map[int64]map[*conn]*lineSub
	last    map[int64]time.Time   // when the product's line was last sent
	pending map[int64]LineState   // published inside the throttle window
	timers  map[int64]*time.Timer // fires at the end of the window
}

// lineSub is what one socket was last sent about one product.
type lineSub struct {
	ticket int64
	state  string
	pos    int64
}

// PublishLine records st and sends every socket following the product's
// line its new place, if it changed, at most once per ProductThrottle per
// product (see above). It never blocks.
func (h *Hub) PublishLine(st LineState) {
	b := &h.lines
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.states == nil {
		b.states, b.seqs = make(map[int64]LineState), make(map[int64]uint64)
		b.last, b.pending, b.timers = make(map[int64]time.Time), make(map[int64]LineState), make(map[int64]*time.Timer)
	}
	pid := st.ProductID
	if b.timers[pid] != nil { // a send is scheduled: it will carry this state
		b.pending[pid] = st
		return
	}
	if wait := time.Until(b.last[pid].Add(h.cfg.ProductThrottle)); wait > 0 {
		b.pending[pid] = st
		b.timers[pid] = time.AfterFunc(wait, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			delete(b.timers, pid)
			if p, ok := b.pending[pid]; ok {
				delete(b.pending, pid)
				b.sendAllLocked(p)
			}
		})
		return
	}
	b.sendAllLocked(st)
}

// sendAllLocked sends st to the product's followers now.
func (b *lineBook) sendAllLocked(st LineState) {
	if old, ok := b.states[st.ProductID]; ok && old == st {
		return
	}
	b.last[st.ProductID] = time.Now()
	b.states[st.ProductID] = st
	b.seqs[st.ProductID]++
	seq := b.seqs[st.ProductID]
	for c, sub := range b.subs[st.ProductID] {
		if c.isClosed() {
			delete(b.subs[st.ProductID], c)
			continue
		}
		b.sendLocked(c, sub, st, seq)
	}
}

// sendLocked queues c's place if it changed since the last message.
func (b *lineBook) sendLocked(c *conn, sub *lineSub, st LineState, seq uint64) {
	m := queueMessage{Type: "queue", ProductID: st.ProductID, Ticket: sub.ticket, Seq: seq}
	switch {
	case sub.ticket <= st.UpTo:
		m.State = "ADMITTED"
		var zero int64
		m.EtaSeconds = &zero
	case st.SoldOut:
		m.State, m.Position = "SOLD_OUT", sub.ticket-st.UpTo
	default:
		m.State, m.Position = "WAITING", sub.ticket-st.UpTo
		if st.Rate > 0 {
			eta := int64(math.Ceil(float64(m.Position) / st.Rate))
			m.EtaSeconds = &eta
		}
		m.BackInStock = sub.state == "SOLD_OUT"
	}
	if m.State == sub.state && m.Position == sub.pos {
		return
	}
	sub.state, sub.pos = m.State, m.Position
	c.deliver(outgoing{data: mustJSON(m)})
	if m.State == "ADMITTED" {
		delete(b.subs[st.ProductID], c)
	}
}

// followLine subscribes c to productID's line with the user's ticket and
// sends the current place if the line is known.
func (c *conn) followLine(productID int64) {
	h := c.hub
	if h.cfg.Lines == nil || productID <= 0 {
		c.deliver(outgoing{data: encodeError(codeBadMessage, "", "no waiting room here")})
		return
	}
	if !c.allowLoad(time.Now()) {
		c.deliver(outgoing{data: encodeError(codeRateLimited, "", "too many subscribes; slow down")})
		return
	}
	ctx, done := c.loadContext()
	ticket, err := h.cfg.Lines.Ticket(ctx, c.userID, productID)
	done()
	switch {
	case err != nil:
		if !c.gone() {
			h.log.Warn("load waiting-room ticket", "user", c.userID, "productId", productID, "err", err)
			c.deliver(outgoing{data: encodeError(codeUnavailable, "", "waiting-room place unavailable; poll the queue API")})
		}
		return
	case ticket <= 0:
		c.deliver(outgoing{data: encodeError(codeNoTicket, "", "no place in this product's waiting room: take one with POST /api/products/{id}/queue")})
		return
	}
	b := &h.lines
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil {
		b.subs = make(map[int64]map[*conn]*lineSub)
	}
	if b.subs[productID] == nil {
		b.subs[productID] = make(map[*conn]*lineSub)
	}
	sub := b.subs[productID][c]
	if sub == nil || sub.ticket != ticket {
		sub = &lineSub{ticket: ticket}
		b.subs[productID][c] = sub
	}
	sub.state, sub.pos = "", 0 // a subscribe always gets the current place
	if st, ok := b.states[productID]; ok {
		b.sendLocked(c, sub, st, b.seqs[productID])
	}
}

func (c *conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
