package pipeline

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
)

// Stampede's durable queues. The pay-timeout delay queue's name lives in
// package order (order.PayTimeoutDelayQueue) because the outbox rows that
// target it are written by persistence.
const (
	// QueueOrderCreated receives ORDER_CREATED events (order.RouteCreated);
	// the order-lock handler consumes it.
	QueueOrderCreated = "stampede.order.created"
	// QueueStockRelease receives status changes into CANCELLED and FAILED;
	// the stock-release handler consumes it and gives the Redis reservation back.
	QueueStockRelease = "stampede.stock.release"
	// QueueOrderClose receives delayed close messages (order.RoutePayTimeout)
	// once they expire in order.PayTimeoutDelayQueue; the order-close handler
	// consumes it.
	QueueOrderClose = "stampede.order.close"
	// QueuePayTimeoutDelay is order.PayTimeoutDelayQueue: no consumer; each
	// message carries a per-message TTL (Expiration) until its order's pay
	// deadline and is dead-lettered to order.EventsExchange with
	// order.RoutePayTimeout when it expires.
	QueuePayTimeoutDelay = order.PayTimeoutDelayQueue
	// QueueDeployment is the marker of the deployment that owns the vhost
	// (TopologyConfig.Deployment): a classic durable queue that no message
	// is ever routed to, whose arguments carry the deployment identity.
	QueueDeployment = "stampede.deployment"
)

// QueueType is the RabbitMQ type of Stampede's durable queues
// (STAMPEDE_AMQP_QUEUE_TYPE). The push service's exclusive per-instance
// queue is always classic: exclusive queues cannot be quorum queues.
type QueueType string

const (
	// QueueQuorum: replicated Raft queues, the production default. Work
	// queues get x-delivery-limit (see DeliveryLimit) and dead-letter to
	// QueueDLQ when a message exceeds it; every queue that dead-letters uses
	// at-least-once dead-lettering (x-dead-letter-strategy at-least-once,
	// x-overflow reject-publish), so an expired delay message is removed from
	// its delay queue only after its target queue confirmed it.
	QueueQuorum QueueType = "quorum"
	// QueueClassic: single-node classic queues, the topology of earlier
	// releases, unchanged (no delivery limit; at-most-once dead-lettering).
	// For development on one node.
	QueueClassic QueueType = "classic"
	// DefaultQueueType is the type used when none is configured.
	DefaultQueueType = QueueQuorum
)

// ParseQueueType parses "quorum" or "classic".
func ParseQueueType(s string) (QueueType, error) {
	switch t := QueueType(s); t {
	case QueueQuorum, QueueClassic:
		return t, nil
	}
	return "", fmt.Errorf("amqp queue type %q is neither quorum nor classic", s)
}

// DefaultMaxAttempts is ConsumerConfig.MaxAttempts's and
// TopologyConfig.MaxAttempts's default.
const DefaultMaxAttempts = 5

// DeliveryLimit is the x-delivery-limit of the quorum work queues for a
// consumer retry budget of maxAttempts deliveries: maxAttempts-1. RabbitMQ
// counts a delivery as failed when it comes back without an ack (a consumer
// channel or connection closed while holding it, or a nack with requeue) and
// dead-letters the message when a failed delivery takes the count past the
// limit, so a message is delivered at most maxAttempts times without ever
// being acked, like a message failing with transient errors. Ordinary
// retries go through the delay queues as new messages and do not count.
func DeliveryLimit(maxAttempts int) int { return max(maxAttempts-1, 0) }

// TopologyConfig says how DeclareTopology declares the queues. Zero fields
// take the documented default.
type TopologyConfig struct {
	// QueueType of every durable queue. Default DefaultQueueType (quorum).
	QueueType QueueType
	// MaxAttempts is the consumers' retry budget (ConsumerConfig.MaxAttempts,
	// STAMPEDE_CONSUMER_MAX_ATTEMPTS), 1…100; quorum work queues get
	// x-delivery-limit DeliveryLimit(MaxAttempts). Default 5.
	MaxAttempts int
	// Deployment is the deployment identity (persistence.Store.DeploymentID,
	// the one the Redis DB carries too). When set, Declare first declares
	// QueueDeployment with the identity in its arguments; RabbitMQ compares a
	// queue's arguments on every declaration and refuses another value with
	// PRECONDITION_FAILED, atomically, so the first deployment to declare
	// owns the vhost and every other's declaration fails with a
	// *VhostDeploymentError: two deployments never consume each other's
	// events. Default "": no marker (tools, tests).
	Deployment string
}

func (t TopologyConfig) withDefaults() TopologyConfig {
	if t.QueueType == "" {
		t.QueueType = DefaultQueueType
	}
	if t.MaxAttempts == 0 {
		t.MaxAttempts = DefaultMaxAttempts
	}
	return t
}

// Validate reports an unknown queue type or a MaxAttempts outside 1…100.
func (t TopologyConfig) Validate() error {
	t = t.withDefaults()
	if _, err := ParseQueueType(string(t.QueueType)); err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	if t.MaxAttempts < 1 || t.MaxAttempts > 100 {
		return fmt.Errorf("invalid config: topology max attempts %d not in 1…100", t.MaxAttempts)
	}
	return nil
}

// QueueSpec is one durable queue of Stampede's topology.
type QueueSpec struct {
	Name string
	// Bindings are routing keys binding the queue to order.EventsExchange.
	Bindings []string
	// Args are the queue's x-arguments (dead-lettering, TTL, queue type,
	// delivery limit). Changing them for an existing queue makes its
	// declaration fail with PRECONDITION_FAILED (see QueueMismatchError):
	// such a change needs a new queue name or a drained and deleted queue.
	Args amqp.Table
}

// quorumArgs returns the arguments every quorum queue of the topology
// carries, plus at-least-once dead-lettering to exchange/key when
// deadLetter (key "" keeps the message's own routing key).
func quorumArgs(deadLetter bool, exchange, key string) amqp.Table {
	a := amqp.Table{"x-queue-type": string(QueueQuorum)}
	if deadLetter {
		a["x-dead-letter-exchange"] = exchange
		if key != "" {
			a["x-dead-letter-routing-key"] = key
		}
		a["x-dead-letter-strategy"] = "at-least-once"
		a["x-overflow"] = "reject-publish"
	}
	return a
}

// Queues returns the queues Declare declares, in declaration order, with
// their arguments for t's queue type.
func (t TopologyConfig) Queues() []QueueSpec {
	t = t.withDefaults()
	work := func(name string, bindings ...string) QueueSpec {
		q := QueueSpec{Name: name, Bindings: bindings}
		if t.QueueType == QueueQuorum {
			q.Args = quorumArgs(true, "", QueueDLQ)
			q.Args["x-delivery-limit"] = int64(DeliveryLimit(t.MaxAttempts))
		}
		return q
	}
	delay := QueueSpec{Name: QueuePayTimeoutDelay, Args: amqp.Table{
		"x-dead-letter-exchange":    order.EventsExchange,
		"x-dead-letter-routing-key": order.RoutePayTimeout,
	}}
	dlq := QueueSpec{Name: QueueDLQ}
	if t.QueueType == QueueQuorum {
		delay.Args = quorumArgs(true, order.EventsExchange, order.RoutePayTimeout)
		dlq.Args = quorumArgs(false, "", "")
	}
	return append([]QueueSpec{
		work(QueueOrderCreated, order.RouteCreated),
		work(QueueStockRelease, order.RouteStatus(order.Cancelled), order.RouteStatus(order.Failed)),
		delay,
		work(QueueOrderClose, order.RoutePayTimeout),
		dlq,
	}, retryQueues(t.QueueType)...)
}

// Topology returns the queues DeclareTopology declares (the default
// TopologyConfig), in declaration order. Names and bindings are the same for
// every TopologyConfig; tests use the list to reset a vhost.
func Topology() []QueueSpec { return TopologyConfig{}.Queues() }

// DeclareTopology declares the default topology: TopologyConfig{}.Declare.
func DeclareTopology(ch *amqp.Channel) error { return TopologyConfig{}.Declare(ch) }

// Declare declares, all durable and idempotently: the topic exchange
// order.EventsExchange, every queue of t.Queues with its bindings, and the
// delay queues' fanout exchanges. It is safe to call from many processes at
// once. A queue that exists with other arguments (another type, another
// delivery limit) fails with a *QueueMismatchError and closes ch (RabbitMQ
// closes a channel on PRECONDITION_FAILED); Conn's default setup also tells
// which type the existing queue has.
func (t TopologyConfig) Declare(ch *amqp.Channel) error {
	t = t.withDefaults()
	if err := t.Validate(); err != nil {
		return err
	}
	if t.Deployment != "" {
		if err := t.declareDeployment(ch); err != nil {
			return err
		}
	}
	if err := ch.ExchangeDeclare(order.EventsExchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("topology: declare exchange %s: %w", order.EventsExchange, err)
	}
	for _, q := range t.Queues() {
		if _, err := ch.QueueDeclare(q.Name, true, false, false, false, q.Args); err != nil {
			return t.declareError(q.Name, err)
		}
		for _, key := range q.Bindings {
			if err := ch.QueueBind(q.Name, key, order.EventsExchange, false, nil); err != nil {
				return fmt.Errorf("topology: bind %s to %s: %w", q.Name, key, err)
			}
		}
	}
	return declareRetryExchanges(ch)
}

// declareOn runs Declare on a fresh channel of conn; on a QueueMismatchError
// whose existing type is unknown it redeclares that queue, on another fresh
// channel, as the other queue type (with the same settings otherwise) to
// find out which type it has. That probe changes nothing: it either
// succeeds as an idempotent redeclaration or fails.
func (t TopologyConfig) declareOn(conn *amqp.Connection) error {
	t = t.withDefaults()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	err = t.Declare(ch)
	ch.Close()
	var mm *QueueMismatchError
	if !errors.As(err, &mm) || mm.Existing != "" {
		return err
	}
	other := t
	other.QueueType = QueueClassic
	if t.QueueType == QueueClassic {
		other.QueueType = QueueQuorum
	}
	for _, q := range other.Queues() {
		if q.Name != mm.Queue {
			continue
		}
		pch, perr := conn.Channel()
		if perr != nil {
			return err
		}
		if _, perr = pch.QueueDeclare(q.Name, true, false, false, false, q.Args); perr == nil {
			mm.Existing = other.QueueType
		} else if e := parseInequivalent(perr); e.arg == "x-queue-type" {
			mm.Existing = typeOf(e.current)
		}
		pch.Close()
	}
	return err
}

// ErrVhostDeployment: the vhost belongs to another deployment. A
// *VhostDeploymentError says which.
var ErrVhostDeployment = errors.New("topology: rabbitmq vhost belongs to another deployment")

// VhostDeploymentError is an ErrVhostDeployment: QueueDeployment in Vhost
// carries identity Theirs, not Ours.
type VhostDeploymentError struct {
	Vhost, Ours, Theirs string
	Err                 error // the broker's PRECONDITION_FAILED
}

func (e *VhostDeploymentError) Error() string {
	return fmt.Sprintf("topology: rabbitmq vhost %s belongs to deployment %s (queue %s), not to this database's %s",
		e.Vhost, e.Theirs, QueueDeployment, e.Ours)
}

func (e *VhostDeploymentError) Unwrap() []error { return []error{ErrVhostDeployment, e.Err} }

// deploymentArgs are QueueDeployment's arguments for identity id and queue
// type qt: a dead-letter routing key that carries the identity (RabbitMQ
// checks x-dead-letter-routing-key for equivalence and wants a dead-letter
// exchange with it; the queue never holds a message to dead-letter). The
// marker has the topology's queue type: a quorum marker is replicated like
// the work queues, so losing the node that created it does not stop every
// process's channel setup (a classic queue is declared on its home node
// only: NOT_FOUND "home node ... is down" until that node returns).
func deploymentArgs(id string, qt QueueType) amqp.Table {
	return amqp.Table{"x-queue-type": string(qt), "x-dead-letter-exchange": QueueDeployment,
		"x-dead-letter-routing-key": id}
}

// declareDeployment declares QueueDeployment for identity id: created if
// missing (the vhost is claimed), accepted if it carries id, refused with a
// *VhostDeploymentError if it carries another identity, with a
// *QueueMismatchError if it has another queue type (RabbitMQ closes ch).
func (t TopologyConfig) declareDeployment(ch *amqp.Channel) error {
	_, err := ch.QueueDeclare(QueueDeployment, true, false, false, false, deploymentArgs(t.Deployment, t.QueueType))
	if err == nil {
		return nil
	}
	switch e := parseInequivalent(err); e.arg {
	case "x-dead-letter-routing-key":
		return &VhostDeploymentError{Vhost: e.vhost, Ours: t.Deployment, Theirs: strings.Trim(e.current, "'"), Err: err}
	case "x-queue-type":
		return t.declareError(QueueDeployment, err)
	}
	return fmt.Errorf("topology: declare deployment marker %s: %w", QueueDeployment, err)
}

// QueueMismatchError is a queue declaration RabbitMQ refused with
// PRECONDITION_FAILED because the queue exists with other arguments: most
// often another queue type (a vhost that holds classic queues from an
// earlier run, and quorum configured, or the reverse), or another
// x-delivery-limit (STAMPEDE_CONSUMER_MAX_ATTEMPTS changed). A queue's
// arguments cannot change in place.
type QueueMismatchError struct {
	Queue string
	// Vhost is the queue's virtual host.
	Vhost string
	// Existing is the type the queue has, "" if unknown.
	Existing QueueType
	// Configured is the type Stampede declared it as.
	Configured QueueType
	// Arg is the first argument RabbitMQ found different, with the value
	// declared (Received) and the queue's (Current), as RabbitMQ wrote them
	// ("none" when absent).
	Arg, Received, Current string
	// Err is the broker's error.
	Err error
}

func (e *QueueMismatchError) Error() string {
	fix := fmt.Sprintf("stop every Stampede process, let the queue drain, delete it (`rabbitmqctl delete_queue -p %s %s`) and start again; or point STAMPEDE_AMQP_URL at a fresh vhost", e.Vhost, e.Queue)
	if e.Existing != "" && e.Existing != e.Configured {
		return fmt.Sprintf("topology: queue %s in vhost %s already exists as a %s queue, but the configured queue type is %s "+
			"(STAMPEDE_AMQP_QUEUE_TYPE / --amqp-queue-type); a queue cannot change its type. Either set STAMPEDE_AMQP_QUEUE_TYPE=%s, "+
			"or, to move to %s queues, %s (broker: %v)", e.Queue, e.Vhost, e.Existing, e.Configured, e.Existing, e.Configured, fix, e.Err)
	}
	hint := ""
	if e.Arg == "x-delivery-limit" {
		hint = " x-delivery-limit is STAMPEDE_CONSUMER_MAX_ATTEMPTS - 1: set STAMPEDE_CONSUMER_MAX_ATTEMPTS back to " +
			deliveryLimitAttempts(e.Current) + ", or"
	}
	return fmt.Sprintf("topology: queue %s in vhost %s exists with other arguments than the configured %s topology declares "+
		"(%s: declared %s, queue has %s).%s %s (broker: %v)", e.Queue, e.Vhost, e.Configured, e.Arg, e.Received, e.Current, hint, fix, e.Err)
}

func (e *QueueMismatchError) Unwrap() error { return e.Err }

func deliveryLimitAttempts(current string) string {
	var n int
	if _, err := fmt.Sscanf(strings.Trim(current, "'"), "%d", &n); err != nil {
		return "the value the queue was declared with"
	}
	return strconv.Itoa(n + 1)
}

// inequivalent is RabbitMQ's "inequivalent arg 'A' for queue 'Q' in vhost
// 'V': received R but current is C".
type inequivalent struct{ arg, vhost, received, current string }

var inequivalentRE = regexp.MustCompile(`inequivalent arg '([^']*)' for queue '[^']*' in vhost '([^']*)': received (.*) but current is (.*)$`)

func parseInequivalent(err error) inequivalent {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return inequivalent{}
	}
	m := inequivalentRE.FindStringSubmatch(ae.Reason)
	if m == nil {
		return inequivalent{}
	}
	return inequivalent{arg: m[1], vhost: m[2], received: shortValue(m[3]), current: shortValue(m[4])}
}

// shortValue turns "the value 'quorum' of type 'longstr'" into 'quorum'.
func shortValue(s string) string {
	if v, ok := strings.CutPrefix(s, "the value "); ok {
		if i := strings.LastIndex(v, " of type "); i >= 0 {
			return v[:i]
		}
		return v
	}
	return s
}

// typeOf maps an x-queue-type value as RabbitMQ prints it to a QueueType.
func typeOf(v string) QueueType {
	switch strings.Trim(v, "'") {
	case "none", "classic":
		return QueueClassic
	case "quorum":
		return QueueQuorum
	}
	return QueueType(strings.Trim(v, "'"))
}

// declareError wraps a failed QueueDeclare: a PRECONDITION_FAILED about
// inequivalent arguments becomes a *QueueMismatchError.
func (t TopologyConfig) declareError(queue string, err error) error {
	e := parseInequivalent(err)
	if e.arg == "" {
		return fmt.Errorf("topology: declare queue %s: %w", queue, err)
	}
	mm := &QueueMismatchError{Queue: queue, Vhost: e.vhost, Configured: t.QueueType, Arg: e.arg, Received: e.received, Current: e.current, Err: err}
	if e.arg == "x-queue-type" {
		mm.Existing = typeOf(e.current)
	}
	return mm
}

// mustRoute reports whether a message published to exchange with routing key
// must reach one of Stampede's durable queues. The relay publishes those with
// Mandatory=true and treats a basic.return as a failed publish (a missing
// queue or binding is a broken topology, not a delivered event). Other
// messages — status changes into WAITING_PAY or PAID, which only push
// instances listen to — are broadcasts: no listener is not a failure, so they
// are published without the mandatory flag and never end up DEAD for it.
func mustRoute(exchange, key string) bool {
	if exchange == "" { // the default exchange routes by queue name
		return true
	}
	if exchange != order.EventsExchange {
		return false
	}
	for _, q := range Topology() {
		if slices.Contains(q.Bindings, key) {
			return true
		}
	}
	return false
}
