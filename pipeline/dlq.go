package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// DLQMessage is one message of the dead-letter queue QueueDLQ.
type DLQMessage struct {
	EventID    string    `json:"eventId"`
	Type       string    `json:"type,omitempty"`
	Queue      string    `json:"queue,omitempty"`
	Handler    string    `json:"handler,omitempty"`
	RoutingKey string    `json:"routingKey,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Attempts   int       `json:"attempts"`
	DeadAt     string    `json:"deadAt,omitempty"`
	Body       string    `json:"body"` // at most 2 KiB
	Published  time.Time `json:"publishedAt,omitzero"`
	// OutboxStatus is the status of the event's mq_outbox row, "" when it
	// has none (a poison body that no outbox row produced): only messages
	// with a row can be replayed.
	OutboxStatus string `json:"outboxStatus"`
}

// DLQReport is what InspectDLQ saw.
type DLQReport struct {
	// Depth is the number of messages ready in QueueDLQ.
	Depth int `json:"depth"`
	// Messages are the first of them (up to the limit), oldest first.
	Messages []DLQMessage `json:"messages"`
	// DeadOutbox are outbox rows the relay gave up on (status DEAD), up to
	// the limit; they are replayable the same way.
	DeadOutbox []persistence.DeadOutboxRow `json:"deadOutbox"`
}

// maxDLQScan bounds how many dead-letter messages one inspect or replay holds
// unacknowledged at once.
const maxDLQScan = 10000

// InspectDLQ peeks at up to limit messages of QueueDLQ and lists up to limit
// DEAD outbox rows. The peek takes messages with basic.get without
// acknowledging them and then nacks them all with requeue, so they stay in
// the queue (RabbitMQ puts them back at their original positions, but
// marks them redelivered). Nothing consumes QueueDLQ, so a peek never races
// a consumer; two concurrent peeks each see only the messages the other does
// not hold at that moment.
func InspectDLQ(ctx context.Context, conn *Conn, store *persistence.Store, limit int) (DLQReport, error) {
	limit = min(max(limit, 1), maxDLQScan)
	rep := DLQReport{Messages: []DLQMessage{}}
	ch, err := conn.Channel(ctx)
	if err != nil {
		return rep, fmt.Errorf("dlq: %w", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(QueueDLQ, true, false, false, false, nil)
	if err != nil {
		return rep, fmt.Errorf("dlq: inspect %s: %w", QueueDLQ, err)
	}
	rep.Depth = q.Messages
	ds, err := getN(ch, min(limit, q.Messages))
	if len(ds) > 0 {
		defer requeueSettled(ch, ds[len(ds)-1].DeliveryTag, true, q.Messages)
	}
	if err != nil {
		return rep, err
	}
	ids := make([]string, 0, len(ds))
	for _, d := range ds {
		ids = append(ids, d.MessageId)
	}
	st, err := store.OutboxStatuses(ctx, ids)
	if err != nil {
		return rep, err
	}
	for _, d := range ds {
		m := toDLQMessage(d)
		m.OutboxStatus = st[d.MessageId]
		rep.Messages = append(rep.Messages, m)
	}
	if rep.DeadOutbox, err = store.DeadOutbox(ctx, limit); err != nil {
		return rep, err
	}
	if rep.DeadOutbox == nil {
		rep.DeadOutbox = []persistence.DeadOutboxRow{}
	}
	return rep, nil
}

// requeueSettled nacks with requeue the delivery tag (and every earlier one
// if multiple), then waits, up to 2s, until QueueDLQ has at least want ready
// messages again. A quorum queue applies a requeue asynchronously: without
// the wait, a peek or replay right after this one could find the queue
// empty.
func requeueSettled(ch *amqp.Channel, tag uint64, multiple bool, want int) {
	if err := ch.Nack(tag, multiple, true); err != nil {
		return // the channel is gone: the broker requeues everything anyway
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		q, err := ch.QueueDeclarePassive(QueueDLQ, true, false, false, false, nil)
		if err != nil || q.Messages >= want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// getN basic.gets up to n messages without acknowledging them.
func getN(ch *amqp.Channel, n int) ([]amqp.Delivery, error) {
	var out []amqp.Delivery
	for len(out) < n {
		d, ok, err := ch.Get(QueueDLQ, false)
		if err != nil {
			return out, fmt.Errorf("dlq: get: %w", err)
		}
		if !ok {
			break
		}
		out = append(out, d)
	}
	return out, nil
}

func toDLQMessage(d amqp.Delivery) DLQMessage {
	body := d.Body
	if len(body) > maxLoggedBody {
		body = body[:maxLoggedBody]
	}
	m := DLQMessage{
		EventID: d.MessageId, Type: d.Type, Queue: strHeader(d.Headers, HeaderQueue),
		Handler: strHeader(d.Headers, HeaderHandler), RoutingKey: strHeader(d.Headers, HeaderRoutingKey),
		Reason: strHeader(d.Headers, HeaderReason), Attempts: intHeader(d.Headers, HeaderAttempts),
		DeadAt: strHeader(d.Headers, HeaderDeadAt), Body: string(body), Published: d.Timestamp,
	}
	if m.Reason == "" {
		brokerDeath(d.Headers, &m)
	}
	return m
}

// brokerDeath fills m from the x-death header of a message RabbitMQ itself
// dead-lettered (a quorum work queue's delivery limit: its consumers died
// holding it) rather than a consumer, which sets the Header* headers.
func brokerDeath(h amqp.Table, m *DLQMessage) {
	deaths, _ := h["x-death"].([]any)
	if len(deaths) == 0 {
		return
	}
	death, _ := deaths[0].(amqp.Table)
	queue, _ := death["queue"].(string)
	reason, _ := death["reason"].(string)
	m.Queue = queue
	m.Handler = handlerOf(queue)
	m.Reason = "dead-lettered by RabbitMQ: " + reason
	if reason == "delivery_limit" {
		m.Reason += " (delivered again and again and never acknowledged: its consumers died or lost their channel while holding it)"
	}
	if keys, _ := death["routing-keys"].([]any); m.RoutingKey == "" && len(keys) > 0 {
		m.RoutingKey, _ = keys[0].(string)
	}
	if t, ok := death["time"].(time.Time); ok {
		m.DeadAt = t.UTC().Format(time.RFC3339Nano)
	}
}

// handlerOf names the handler consuming a work queue ("" for others).
func handlerOf(queue string) string {
	switch queue {
	case QueueOrderCreated:
		return ConsumerOrderLock
	case QueueStockRelease:
		return ConsumerStockRelease
	case QueueOrderClose:
		return ConsumerOrderClose
	}
	return ""
}

// ReplayRequest selects what ReplayDLQ replays.
type ReplayRequest struct {
	// EventIDs selects dead-letter messages and DEAD outbox rows by event id.
	EventIDs []string
	// All selects every dead-letter message and every DEAD outbox row.
	All bool
	// DropPoison acknowledges (drops) selected dead-letter messages that
	// have no outbox row and so cannot be replayed. Default false: they stay.
	DropPoison bool
}

// ReplayResult is what ReplayDLQ did.
type ReplayResult struct {
	// Replayed are event ids whose outbox row was set back to NEW (from
	// the dead-letter queue or DEAD rows); the relay publishes them again.
	Replayed []string `json:"replayed"`
	// Acked is the number of dead-letter messages removed from QueueDLQ
	// because their event was replayed (or is on its way already).
	Acked int `json:"acked"`
	// Dropped are selected messages without an outbox row that were
	// removed because DropPoison was set.
	Dropped []string `json:"dropped"`
	// Kept are selected messages without an outbox row, left in QueueDLQ.
	Kept []string `json:"kept"`
	// NotFound are requested event ids found neither in QueueDLQ nor among
	// the DEAD outbox rows.
	NotFound []string `json:"notFound"`
}

// ReplayDLQ replays dead events through the outbox, so consumers still
// deduplicate them by event id: for each selected message of QueueDLQ whose
// event has an outbox row, the row is set back to NEW (persistence.Store.
// ReplayOutbox; a row already NEW/RETRY/SENDING is on its way and left alone)
// and, after that commit, the message is acked off the queue. Selected DEAD
// outbox rows are set back to NEW too. Messages not selected, and poison
// messages without an outbox row unless DropPoison, are nacked back into the
// queue. At most 10,000 dead-letter messages are handled per call.
func ReplayDLQ(ctx context.Context, conn *Conn, store *persistence.Store, req ReplayRequest) (ReplayResult, error) {
	res := ReplayResult{Replayed: []string{}, Dropped: []string{}, Kept: []string{}, NotFound: []string{}}
	if !req.All && len(req.EventIDs) == 0 {
		return res, errors.New("dlq: replay needs event ids or all")
	}
	sel := newReplaySelection(req)
	ch, err := conn.Channel(ctx)
	if err != nil {
		return res, fmt.Errorf("dlq: %w", err)
	}
	defer ch.Close() // anything still unacked goes back to the queue
	q, err := ch.QueueDeclarePassive(QueueDLQ, true, false, false, false, nil)
	if err != nil {
		return res, fmt.Errorf("dlq: inspect %s: %w", QueueDLQ, err)
	}
	ds, err := getN(ch, min(q.Messages, maxDLQScan))
	if err != nil {
		return res, err
	}
	status, err := sel.replayOutbox(ctx, store, ds, &res)
	if err != nil {
		return res, err
	}
	// Committed: ack what was replayed (or was pending anyway), drop poison
	// if asked, requeue the rest.
	if err := sel.ack(ds, status, &res); err != nil {
		return res, err
	}
	if err := sel.requeue(ch, ds, status, q.Messages); err != nil {
		return res, err
	}
	for _, id := range req.EventIDs {
		if !sel.seen[id] {
			res.NotFound = append(res.NotFound, id)
		}
	}
	return res, nil
}

// replaySelection is what a ReplayRequest selects, and the selected event
// ids met so far (seen: in the dead-letter queue or among the DEAD rows).
type replaySelection struct {
	req  ReplayRequest
	want map[string]bool
	seen map[string]bool
}

func newReplaySelection(req ReplayRequest) *replaySelection {
	want := make(map[string]bool, len(req.EventIDs))
	for _, id := range req.EventIDs {
		want[id] = true
	}
	return &replaySelection{req: req, want: want, seen: map[string]bool{}}
}

func (sel *replaySelection) selected(id string) bool { return sel.req.All || sel.want[id] }

// replayOutbox sets back to NEW the outbox rows of the selected messages of
// ds and the selected DEAD rows (res.Replayed), in one commit. status maps
// each selected message's event id to its outbox row's status (absent: no
// row, a poison message).
func (sel *replaySelection) replayOutbox(ctx context.Context, store *persistence.Store, ds []amqp.Delivery, res *ReplayResult) (status map[string]string, err error) {
	var ids []string
	for _, d := range ds {
		if sel.selected(d.MessageId) {
			ids = append(ids, d.MessageId)
		}
	}
	if len(ids) > 0 {
		if status, err = store.OutboxStatuses(ctx, ids); err != nil {
			return nil, err
		}
	}
	// DEAD outbox rows: selected ones are replayed with the queue's.
	dead, err := store.DeadOutbox(ctx, maxDLQScan)
	if err != nil {
		return nil, err
	}
	replay := make([]string, 0, len(ids)+len(dead))
	for _, id := range ids {
		if _, ok := status[id]; ok {
			replay = append(replay, id)
		}
	}
	for _, r := range dead {
		if sel.selected(r.EventID) {
			replay = append(replay, r.EventID)
			sel.seen[r.EventID] = true
		}
	}
	slices.Sort(replay)
	replay = slices.Compact(replay)
	if len(replay) > 0 {
		if res.Replayed, err = store.ReplayOutbox(ctx, replay); err != nil {
			return nil, err
		}
	}
	return status, nil
}

// ack acks off the queue each selected message of ds whose event has an
// outbox row (res.Acked) and, with DropPoison, those without (res.Dropped);
// the other selected ones are kept (res.Kept).
func (sel *replaySelection) ack(ds []amqp.Delivery, status map[string]string, res *ReplayResult) error {
	for _, d := range ds {
		id := d.MessageId
		if !sel.selected(id) {
			continue
		}
		sel.seen[id] = true
		var err error
		switch _, has := status[id]; {
		case has:
			err = d.Ack(false)
			res.Acked++
		case sel.req.DropPoison:
			err = d.Ack(false)
			res.Dropped = append(res.Dropped, id)
		default:
			res.Kept = append(res.Kept, id)
		}
		if err != nil {
			return fmt.Errorf("dlq: ack %s: %w", id, err)
		}
	}
	return nil
}

// requeue nacks back into the queue the messages of ds not acked: those
// not selected and the kept poison. The last one waits until the broker
// has them all back (queued: the queue's depth before ds was taken).
func (sel *replaySelection) requeue(ch *amqp.Channel, ds []amqp.Delivery, status map[string]string, queued int) error {
	var back []amqp.Delivery
	for _, d := range ds {
		if !sel.selected(d.MessageId) || (!sel.req.DropPoison && status[d.MessageId] == "") {
			back = append(back, d)
		}
	}
	for i, d := range back {
		if i == len(back)-1 {
			requeueSettled(ch, d.DeliveryTag, false, queued-len(ds)+len(back))
			break
		}
		if err := d.Nack(false, true); err != nil {
			return fmt.Errorf("dlq: requeue %s: %w", d.MessageId, err)
		}
	}
	return nil
}

// deadLetter moves d, which handler h gave up on (poison, or out of
// attempts: err says why), to QueueDLQ with the Header* headers and acks the
// original once the broker confirmed the copy. An error: the republish
// failed and d is neither moved nor acked (the caller requeues it after its
// backoff).
func (c *Consumer) deadLetter(ctx context.Context, h handler, d amqp.Delivery, ev order.Event, err error, attempt int,
	routingKey string, pub *confirmPublisher) error {
	body := d.Body
	if len(body) > maxLoggedBody {
		body = body[:maxLoggedBody]
	}
	c.log.Error("consumer: dead-lettering message", "handler", h.name, "eventId", d.MessageId,
		"orderNo", ev.OrderNo, "routingKey", d.RoutingKey, "attempt", attempt, "body", string(body), "err", err)
	reason := "unknown"
	if err != nil {
		reason = truncate(err.Error(), 500)
	}
	perr := pub.publish(ctx, "", QueueDLQ, republish(d, amqp.Table{
		HeaderQueue: h.queue, HeaderHandler: h.name, HeaderReason: reason,
		HeaderAttempts: int32(attempt), HeaderRoutingKey: routingKey,
		HeaderDeadAt: time.Now().UTC().Format(time.RFC3339Nano),
	}))
	if perr != nil {
		return perr
	}
	_ = d.Ack(false)
	return nil
}
