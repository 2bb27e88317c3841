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
//	{"type":"queue","productId","mode","ticket","state","position","etaSeconds","seq","backInStock"}
//
// whenever the socket's state or position changes: state PRE_QUEUE (before
// the opening: no position yet), SHUFFLING (the opening passed, the shuffle
// is being published), WAITING (position = tickets still ahead, this one
// included; 0 in a random room, where nobody has a fixed place), ADMITTED
// ("your turn", a draw's win: the last message of the subscription), LOST (a
// draw's entry that was not drawn: also the last), or SOLD_OUT (nothing
// left: everyone still waiting gets it at the first PublishLine after the
// sell-out; backInStock marks the WAITING that follows if released units
// let the line move again). When the shuffle is published the hub reads the
// places of the pre-queued followers (LineReader.Places) and sends each its
// position. In a random room a buyer is admitted by key, not by place:
// PublishAdmitted names them. Lines are throttled like product messages: at
// most one send per product per Config.ProductThrottle, a state published
// inside the window waits for its end and the latest one wins. seq grows
// with every PublishLine of the product, so a client can drop a message
// older than one it has (the queue of one socket never reorders, and the hub
// never queues a lower seq after a higher one).

// LineState is one product's waiting-room line as the pacer left it.
type LineState struct {
	ProductID int64
	Mode      string  // fifo, random, draw ("" = fifo)
	Closed    bool    // the opening passed
	Shuffled  bool    // the pre-queue's shuffle is published
	UpTo      int64   // places up to this one were admitted
	Cutoff    int64   // draw: the last place that can win
	Rate      float64 // admissions per second of the pacer's last step (0: unknown)
	SoldOut   bool    // nothing is left to buy
}

// LinePlace is a user's ticket in a product's room.
type LinePlace struct {
	Ticket string // opaque ticket id; "" = none
	Place  int64  // 0: not placed yet (pre-queued before the shuffle, or waiting in a random room)
}

// A LineReader finds users' tickets in a product's waiting room; the main
// package implements it over package lua.
type LineReader interface {
	// Ticket returns the user's last ticket for the product (Ticket "": none).
	Ticket(ctx context.Context, userID, productID int64) (LinePlace, error)
	// Places returns the places of users' tickets (missing: none), read
	// once the pre-queue's shuffle is published.
	Places(ctx context.Context, productID int64, userIDs []int64) (map[int64]int64, error)
}

// Error code of a queue subscription without a ticket.
const codeNoTicket = "NO_TICKET"

// queueMessage is the server's waiting-room message.
type queueMessage struct {
	Type        string `json:"type"` // "queue"
	ProductID   int64  `json:"productId"`
	Mode        string `json:"mode"`
	Ticket      string `json:"ticket"`
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
	ticket  string
	place   int64 // 0: not placed yet
	looking bool  // a Places lookup for it is running
	state   string
	pos     int64
}

// PublishLine records st and sends every socket following the product's
// line its new place, if it changed, at most once per ProductThrottle per
// product (see above). It never blocks.
func (h *Hub) PublishLine(st LineState) {
	b := &h.lines
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
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
				h.sendAllLocked(p)
			}
		})
		return
	}
	h.sendAllLocked(st)
}

// PublishAdmitted tells the followers among userIDs of a random room that
// they were admitted (lua's room log); it never blocks.
func (h *Hub) PublishAdmitted(productID int64, userIDs []int64) {
	if len(userIDs) == 0 {
		return
	}
	in := make(map[int64]bool, len(userIDs))
	for _, u := range userIDs {
		in[u] = true
	}
	b := &h.lines
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	b.seqs[productID]++
	seq := b.seqs[productID]
	for c, sub := range b.subs[productID] {
		if in[c.userID] {
			b.sendAdmittedLocked(c, sub, b.states[productID], seq)
		}
	}
}

func (b *lineBook) initLocked() {
	if b.states == nil {
		b.states, b.seqs = make(map[int64]LineState), make(map[int64]uint64)
		b.last, b.pending, b.timers = make(map[int64]time.Time), make(map[int64]LineState), make(map[int64]*time.Timer)
		b.subs = make(map[int64]map[*conn]*lineSub)
	}
}

// sendAllLocked sends st to the product's followers now.
func (h *Hub) sendAllLocked(st LineState) {
	b := &h.lines
	if old, ok := b.states[st.ProductID]; ok && old == st {
		return
	}
	b.last[st.ProductID] = time.Now()
	b.states[st.ProductID] = st
	b.seqs[st.ProductID]++
	seq := b.seqs[st.ProductID]
	var unplaced []int64
	for c, sub := range b.subs[st.ProductID] {
		if c.isClosed() {
			delete(b.subs[st.ProductID], c)
			continue
		}
		if st.Shuffled && st.Mode != "random" && sub.place == 0 && !sub.looking {
			sub.looking = true
			unplaced = append(unplaced, c.userID)
		}
		b.sendLocked(c, sub, st, seq)
	}
	if len(unplaced) > 0 {
		h.spawn(func() { h.placeFollowers(st.ProductID, unplaced) })
	}
}

// placeFollowers reads the places of pre-queued followers after the
// shuffle and sends each its position.
func (h *Hub) placeFollowers(productID int64, userIDs []int64) {
	ctx, cancel := context.WithTimeout(h.ctx, 5*h.cfg.SnapshotTimeout)
	places, err := h.cfg.Lines.Places(ctx, productID, userIDs)
	cancel()
	if err != nil {
		h.log.Warn("load waiting-room places after the shuffle", "productId", productID, "users", len(userIDs), "err", err)
	}
	b := &h.lines
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.states[productID]
	seq := b.seqs[productID]
	for c, sub := range b.subs[productID] {
		if !sub.looking {
			continue
		}
		sub.looking = false // a failed lookup is tried again at the next PublishLine
		if p, ok := places[c.userID]; ok && p > 0 {
			sub.place = p
			b.sendLocked(c, sub, st, seq)
		}
	}
}

// sendLocked queues c's place if it changed since the last message.
func (b *lineBook) sendLocked(c *conn, sub *lineSub, st LineState, seq uint64) {
	m := queueMessage{Type: "queue", ProductID: st.ProductID, Mode: st.Mode, Ticket: sub.ticket, Seq: seq}
	if m.Mode == "" {
		m.Mode = "fifo"
	}
	switch {
	case sub.place == 0 && !st.Closed && !st.Shuffled:
		m.State = "PRE_QUEUE"
	case sub.place == 0 && !st.Shuffled:
		m.State = "SHUFFLING"
	case sub.place == 0 && st.Mode == "random":
		m.State = "WAITING"
		if st.SoldOut {
			m.State = "SOLD_OUT"
		}
		m.BackInStock = m.State == "WAITING" && sub.state == "SOLD_OUT"
	case sub.place == 0:
		return // shuffled, its place is being read (placeFollowers)
	case st.Mode == "draw" && st.Cutoff > 0 && sub.place > st.Cutoff:
		m.State = "LOST"
	case sub.place <= st.UpTo:
		b.sendAdmittedLocked(c, sub, st, seq)
		return
	case st.SoldOut:
		m.State, m.Position = "SOLD_OUT", sub.place-st.UpTo
	default:
		m.State, m.Position = "WAITING", sub.place-st.UpTo
		if st.Rate > 0 && st.Mode != "draw" { // a draw's reserve list moves only when a win passes on
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
	if m.State == "LOST" {
		delete(b.subs[st.ProductID], c)
	}
}

// sendAdmittedLocked queues "your turn" (the subscription's last message).
func (b *lineBook) sendAdmittedLocked(c *conn, sub *lineSub, st LineState, seq uint64) {
	mode := st.Mode
	if mode == "" {
		mode = "fifo"
	}
	var zero int64
	m := queueMessage{Type: "queue", ProductID: st.ProductID, Mode: mode, Ticket: sub.ticket, State: "ADMITTED", EtaSeconds: &zero, Seq: seq}
	if sub.state != "ADMITTED" {
		sub.state, sub.pos = "ADMITTED", 0
		c.deliver(outgoing{data: mustJSON(m)})
	}
	delete(b.subs[st.ProductID], c)
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
	lp, err := h.cfg.Lines.Ticket(ctx, c.userID, productID)
	done()
	switch {
	case err != nil:
		if !c.gone() {
			h.log.Warn("load waiting-room ticket", "user", c.userID, "productId", productID, "err", err)
			c.deliver(outgoing{data: encodeError(codeUnavailable, "", "waiting-room place unavailable; poll the queue API")})
		}
		return
	case lp.Ticket == "":
		c.deliver(outgoing{data: encodeError(codeNoTicket, "", "no place in this product's waiting room: take one with POST /api/products/{id}/queue")})
		return
	}
	b := &h.lines
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	if b.subs[productID] == nil {
		b.subs[productID] = make(map[*conn]*lineSub)
	}
	sub := b.subs[productID][c]
	if sub == nil || sub.ticket != lp.Ticket || sub.place != lp.Place {
		sub = &lineSub{ticket: lp.Ticket, place: lp.Place}
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
