package order

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// An orderNo is a decimal string of 22 or more digits:
//
//	<19-digit id><2-digit shard><productId>
//
// id is a Snowflake-style int64 (milliseconds since Epoch << 22 | node << 12 |
// sequence), so orderNos of one product sort by acceptance time. Carrying the
// product and stock shard lets any gateway find an order's Redis records (which
// live in that shard's hash slot) before the writer has put it into MySQL.
// The layout follows Twitter's Snowflake ids (2010).
type No = string

// Epoch is the zero of orderNo timestamps: 2024-01-01T00:00:00Z.
var Epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	nodeBits = 10
	seqBits  = 12
	maxNode  = 1<<nodeBits - 1
	maxSeq   = 1<<seqBits - 1
	idDigits = 19
)

// ErrBadOrderNo is returned by ParseNo for a string that is not an orderNo.
var ErrBadOrderNo = errors.New("order: malformed orderNo")

// NoGenerator makes unique orderNos for one process. Safe for concurrent use.
type NoGenerator struct {
	mu   sync.Mutex
	node int64
	last int64 // ms since Epoch of the last id
	seq  int64
	now  func() time.Time
}

// NewNoGenerator returns a generator for node (0…1023). Two live processes
// must not share a node id; the gateway derives it from config or at random.
func NewNoGenerator(node int64) (*NoGenerator, error) {
	if node < 0 || node > maxNode {
		return nil, fmt.Errorf("order: node id %d out of range 0..%d", node, maxNode)
	}
	return &NoGenerator{node: node, now: time.Now}, nil
}

// Next returns a new orderNo for productId and stock shard (0…99).
func (g *NoGenerator) Next(productID int64, shard int) No {
	g.mu.Lock()
	ms := g.now().Sub(Epoch).Milliseconds()
	if ms < g.last { // clock went backwards: keep counting on the last millisecond
		ms = g.last
	}
	if ms == g.last {
		g.seq++
		if g.seq > maxSeq { // 4096 ids in one ms: borrow the next millisecond
			g.last++
			g.seq = 0
		}
		ms = g.last
	} else {
		g.last, g.seq = ms, 0
	}
	id := ms<<(nodeBits+seqBits) | g.node<<seqBits | g.seq
	g.mu.Unlock()
	return FormatNo(id, shard, productID)
}

// FormatNo builds the orderNo for the given parts.
func FormatNo(id int64, shard int, productID int64) No {
	return fmt.Sprintf("%0*d%02d%d", idDigits, id, shard, productID)
}

// ParseNo splits an orderNo into its id, shard and productId.
func ParseNo(no string) (id int64, shard int, productID int64, err error) {
	if len(no) < idDigits+3 || len(no) > 40 {
		return 0, 0, 0, ErrBadOrderNo
	}
	for i := 0; i < len(no); i++ {
		if no[i] < '0' || no[i] > '9' {
			return 0, 0, 0, ErrBadOrderNo
		}
	}
	id, err = strconv.ParseInt(no[:idDigits], 10, 64)
	if err != nil {
		return 0, 0, 0, ErrBadOrderNo
	}
	s, _ := strconv.Atoi(no[idDigits : idDigits+2])
	productID, err = strconv.ParseInt(no[idDigits+2:], 10, 64)
	if err != nil || productID <= 0 || no[idDigits+2] == '0' {
		return 0, 0, 0, ErrBadOrderNo
	}
	return id, s, productID, nil
}

// NoTime returns the acceptance time encoded in an orderNo id.
func NoTime(id int64) time.Time {
	return Epoch.Add(time.Duration(id>>(nodeBits+seqBits)) * time.Millisecond)
}

// Node is the node id the generator writes into new orderNos.
func (g *NoGenerator) Node() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.node
}

// SetNode changes the node id of later orderNos (0…1023); the millisecond and
// sequence state is kept, so ids stay increasing. Used when a gateway's
// leased node id (gateway.NodeLease) had to be replaced.
func (g *NoGenerator) SetNode(node int64) error {
	if node < 0 || node > maxNode {
		return fmt.Errorf("order: node id %d out of range 0..%d", node, maxNode)
	}
	g.mu.Lock()
	g.node = node
	g.mu.Unlock()
	return nil
}
