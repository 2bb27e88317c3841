package push

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// Snapshot is the current state of one order as the database has it.
type Snapshot struct {
	OrderNo     string
	UserID      int64 // owner; a snapshot of another user's order is never sent
	Status      order.Status
	Version     int64 // order_info.version; higher is newer
	UpdatedAt   time.Time
	PayDeadline *time.Time // set while WAITING_PAY
}

// ErrNotFound is what a Snapshotter returns for an order that does not exist
// or belongs to another user.
var ErrNotFound = errors.New("push: order not found")

// A Snapshotter reads the current state of orders; the main package implements
// it over the MySQL store. Both methods must only return orders of userID.
type Snapshotter interface {
	// OrderSnapshot returns the order orderNo if it belongs to userID, or
	// ErrNotFound (also when it belongs to someone else).
	OrderSnapshot(ctx context.Context, userID int64, orderNo string) (Snapshot, error)
	// RecentOrders returns up to limit of the user's orders, newest first.
	RecentOrders(ctx context.Context, userID int64, limit int) ([]Snapshot, error)
}

// Close codes the hub uses besides the standard ones.
const (
	// StatusUnauthenticated closes a socket without a valid token (the
	// WebSocket counterpart of HTTP 401).
	StatusUnauthenticated = 4401
	// StatusTooManySockets closes a user's oldest socket when a new one
	// would exceed Config.MaxSocketsPerUser (the counterpart of HTTP 429).
	StatusTooManySockets = 4429
)

// Subprotocol is the WebSocket subprotocol of Stampede's messages. Browsers
// cannot set an Authorization header on a WebSocket, so clients offer
// ["stampede", "<token>"] and the server answers "stampede".
const Subprotocol = "stampede"

// Messages from server to client. Times are RFC 3339 UTC.
type orderMessage struct {
	Type        string     `json:"type"` // "order"
	OrderNo     string     `json:"orderNo"`
	Status      string     `json:"status"`
	Version     int64      `json:"version"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	PayDeadline *time.Time `json:"payDeadline,omitempty"`
}

type productMessage struct {
	Type      string `json:"type"` // "product"
	ProductID int64  `json:"productId"`
	Available int64  `json:"available"`
	SoldOut   bool   `json:"soldOut"`
}

type errorMessage struct {
	Type    string `json:"type"` // "error"
	Code    string `json:"code"`
	OrderNo string `json:"orderNo,omitempty"`
	Message string `json:"message"`
}

// Error codes of errorMessage.
const (
	codeNotFound    = "ORDER_NOT_FOUND"
	codeBadMessage  = "BAD_MESSAGE"
	codeUnavailable = "SNAPSHOT_UNAVAILABLE"
	codeRateLimited = "RATE_LIMITED"
)

// clientMessage is what a client may send: {"type":"subscribe","orderNo"} or
// {"type":"ping"} (answered with {"type":"pong"}, for clients that want to
// detect a dead socket themselves; browsers cannot see WebSocket pings).
type clientMessage struct {
	Type      string `json:"type"`
	OrderNo   string `json:"orderNo"`
	ProductID int64  `json:"productId"` // {"type":"queue","productId"}: follow the waiting-room line (line.go)
}

var pongMessage = []byte(`{"type":"pong"}`)

// outgoing is one queued message; orderNo and version are set for order
// messages, which go through the per-socket version check.
type outgoing struct {
	orderNo string
	version int64
	data    []byte
}

func encodeOrder(no string, st order.Status, version int64, updated time.Time, deadline *time.Time) outgoing {
	var dl *time.Time
	if deadline != nil {
		t := deadline.UTC()
		dl = &t
	}
	b, _ := json.Marshal(orderMessage{Type: "order", OrderNo: no, Status: string(st), Version: version,
		UpdatedAt: updated.UTC(), PayDeadline: dl})
	return outgoing{orderNo: no, version: version, data: b}
}

func encodeSnapshot(s Snapshot) outgoing {
	return encodeOrder(s.OrderNo, s.Status, s.Version, s.UpdatedAt, s.PayDeadline)
}

func encodeEvent(e order.Event) outgoing {
	return encodeOrder(e.OrderNo, e.Status, e.Version, e.OccurredAt, e.PayDeadline)
}

func encodeError(code, no, msg string) []byte {
	b, _ := json.Marshal(errorMessage{Type: "error", Code: code, OrderNo: no, Message: msg})
	return b
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only fixed, marshalable types reach here
	}
	return b
}
