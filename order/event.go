package order

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// EventType names what happened; it is mq_outbox.event_type and the AMQP
// message type.
type EventType string

// Event types.
const (
	EventCreated       EventType = "ORDER_CREATED"        // writer: a reservation became an order row
	EventStatusChanged EventType = "ORDER_STATUS_CHANGED" // any transition (docs/spec.md §2)
	EventPayTimeout    EventType = "ORDER_PAY_TIMEOUT"    // delayed close message, due at pay_deadline
	// EventStatusBatch carries, in Events, status changes of one product
	// into one status made by one transaction: one message where there were
	// hundreds (the batched consumer's WAITING_PAY changes, for push; the
	// sweeper's CANCELLED closes, for push and the release consumer). Its
	// OrderNo is the first event's.
	EventStatusBatch EventType = "ORDER_STATUS_BATCH"
)

// Routing keys on the events exchange. Status changes are routed as
// "order.status.<STATUS>" so the release queue can bind to CANCELLED and FAILED
// only and push instances to "order.status.*".
const (
	RouteCreated    = "order.created"
	RoutePayTimeout = "order.pay_timeout"
)

// RouteStatus is the routing key of a status change into s.
func RouteStatus(s Status) string { return "order.status." + string(s) }

// Event is the JSON body of every message Stampede publishes. Fields that do
// not apply to a Type are omitted. IDs are deterministic (see the *EventID
// functions), so re-creating an event yields the same eventId and consumers
// deduplicate it through mq_consume_log.
type Event struct {
	EventID     string     `json:"eventId"`
	Type        EventType  `json:"type"`
	OrderNo     string     `json:"orderNo"`
	UserID      int64      `json:"userId"`
	ProductID   int64      `json:"productId"`
	Quantity    int64      `json:"quantity"`
	Amount      int64      `json:"amount,omitempty"`
	From        Status     `json:"from,omitempty"`
	Status      Status     `json:"status,omitempty"`
	Version     int64      `json:"version,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	PayDeadline *time.Time `json:"payDeadline,omitempty"`
	OccurredAt  time.Time  `json:"occurredAt"`
	// Events are the status changes of an EventStatusBatch.
	Events []Event `json:"events,omitempty"`
}

// CreatedEventID is the eventId of an order's ORDER_CREATED event.
func CreatedEventID(no No) string { return "created:" + no }

// StatusEventID is the eventId of the status change that gave an order version v.
func StatusEventID(no No, version int64) string {
	return "status:" + no + ":" + strconv.FormatInt(version, 10)
}

// PayTimeoutEventID is the eventId of an order's delayed close message.
func PayTimeoutEventID(no No) string { return "timeout:" + no }

// StatusBatchEventID is the eventId of a batch of status changes into s whose
// first order is first. An order moves into a status at most once, so no two
// batches share their first order and status.
func StatusBatchEventID(first No, s Status) string { return "statuses:" + first + ":" + string(s) }

// DecodeEvent parses and checks a message body. It returns an error for a
// body that is not JSON, has an unknown type or lacks what its type needs; such
// a message is poison and goes to the dead-letter queue.
func DecodeEvent(body []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(body, &e); err != nil {
		return Event{}, fmt.Errorf("order: decode event: %w", err)
	}
	if e.EventID == "" || e.OrderNo == "" {
		return Event{}, fmt.Errorf("order: event without eventId or orderNo")
	}
	if _, _, _, err := ParseNo(e.OrderNo); err != nil {
		return Event{}, fmt.Errorf("order: event %s: %w", e.EventID, err)
	}
	switch e.Type {
	case EventCreated:
		if e.Quantity <= 0 || e.ProductID <= 0 || e.UserID <= 0 {
			return Event{}, fmt.Errorf("order: event %s: invalid created payload", e.EventID)
		}
	case EventStatusChanged:
		if !e.Status.Valid() || e.Version <= 0 {
			return Event{}, fmt.Errorf("order: event %s: invalid status payload", e.EventID)
		}
	case EventPayTimeout:
	case EventStatusBatch:
		if len(e.Events) == 0 || !e.Status.Valid() {
			return Event{}, fmt.Errorf("order: event %s: empty status batch", e.EventID)
		}
		for _, x := range e.Events {
			if x.Type != EventStatusChanged || x.Status != e.Status || !x.Status.Valid() || x.Version <= 0 || x.UserID <= 0 {
				return Event{}, fmt.Errorf("order: event %s: invalid event %s in status batch", e.EventID, x.EventID)
			}
			if _, _, _, err := ParseNo(x.OrderNo); err != nil {
				return Event{}, fmt.Errorf("order: event %s: %w", e.EventID, err)
			}
		}
	default:
		return Event{}, fmt.Errorf("order: event %s: unknown type %q", e.EventID, e.Type)
	}
	return e, nil
}

// Reservation is what the reserve script appends to a product's intake
// stream: one accepted purchase that the writers must turn into an order row
// (lua.ParseReservation decodes the entry).
type Reservation struct {
	OrderNo    No
	UserID     int64
	RequestID  string
	ProductID  int64
	Shard      int
	Quantity   int64
	UnitPrice  int64 // minor units
	AcceptedAt time.Time
}

// Amount is quantity × unit price, in minor units.
func (r Reservation) Amount() int64 { return r.Quantity * r.UnitPrice }

// DefaultRequestTTL is the default lifetime of a requestId's idempotency
// record (the gateway's RequestTTL, the writer's): within it, every replay of
// (user, product, requestId) answers the same order; after it, the same
// requestId is a new purchase intent, like a new requestId, and the writer
// stores it as a new order (request_seq + 1), never as a failed one.
const DefaultRequestTTL = 24 * time.Hour

// ValidRequestID reports whether s is a requestId: 1–64 characters of
// [A-Za-z0-9._:-] (docs/spec.md §3). A requestId is scoped per (user, product).
func ValidRequestID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// AMQP topology names shared by the relay, the consumers and push.
const (
	// EventsExchange is the durable topic exchange every outbox event is
	// published to, with the routing keys above.
	EventsExchange = "stampede.events"
	// PayTimeoutDelayQueue holds delayed close messages; it has no consumer.
	// Each message carries a per-message TTL until its pay deadline and is
	// dead-lettered to EventsExchange with RoutePayTimeout when it expires.
	PayTimeoutDelayQueue = "stampede.order.pay_timeout.delay"
)
