package systest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/pipeline"
)

// TestRabbitClusterLeaderKilled (issue 13): the topology declared on a
// private 3-node RabbitMQ cluster with quorum queues (3 members each), every
// role in one process given the three nodes' URLs (STAMPEDE_AMQP_URL as a
// list); in the middle of a 5,000-order sale the node leading
// stampede.order.created is killed with SIGKILL. The relay and the
// consumers reconnect to another node, the queues elect new leaders from
// their replicas; every order reaches WAITING_PAY exactly once (one
// order-lock consume-log row each), no outbox row is left unsent and docs/spec.md §5
// holds.
//
// It was red until the relay and the consumers' publishers dropped a
// channel after a nack: RabbitMQ 3.10 goes on nacking every publish of a
// channel that published while the queue had no leader, even after a new
// leader is elected (pipeline Relay.awaitConfirms).
func TestRabbitClusterLeaderKilled(t *testing.T) {
	t.Parallel()
	rc := sharedRabbitCluster(t)
	e := newEnvFor(t, "rabbitcluster")
	e.amqpURL, e.directAMQ = rc.urls(), rc.nodes[0].url()
	e.lockDesign = "batch" // the leader of stampede.order.created, which the batch design's drain runs through
	app := e.serve("app", allButPush, "--amqp-queue-type", "quorum")
	e.waitReady(60 * time.Second)
	const n = 5000
	pid := e.product(n)

	leader := func() (*rabbitNode, string) {
		for _, node := range rc.nodes {
			out, err := rc.ctl(time.Minute, node, "list_queues", "-q", "--formatter", "json", "name", "type", "leader", "members")
			if err != nil {
				continue
			}
			var qs []map[string]any
			if json.Unmarshal([]byte(out[strings.IndexByte(out, '['):]), &qs) != nil {
				continue
			}
			for _, q := range qs {
				if q["name"] == pipeline.QueueOrderCreated {
					l, _ := q["leader"].(string)
					return rc.node(l), out
				}
			}
		}
		return nil, ""
	}
	intents, end := e.saleThroughRabbitFault(pid, n, func() {
		victim, queues := leader()
		if victim == nil {
			t.Fatalf("no leader of %s found: %s", pipeline.QueueOrderCreated, queues)
		}
		t.Logf("queues before the kill: %s", strings.Join(strings.Fields(queues), " "))
		rc.kill9(victim)
		t.Logf("killed %s (leader of %s)", victim.name, pipeline.QueueOrderCreated)
	})
	if !app.alive() {
		t.Fatal("the process died with the RabbitMQ node")
	}
	rep := e.settle(pid, end, 3*time.Minute)
	e.checkIntents(pid, intents, rep)
	orders := len(e.orders(pid))
	if got := e.consumedCreated(pid); got != orders {
		t.Errorf("order-lock consume log holds %d of the %d orders' ORDER_CREATED events", got, orders)
	}
	rows := e.count(`SELECT COUNT(*) FROM mq_consume_log l JOIN order_info o ON l.event_id = CONCAT('created:', o.order_no)
		WHERE l.consumer_name = ? AND o.product_id = ?`, pipeline.ConsumerOrderLock, pid)
	if rows != orders {
		t.Errorf("order-lock consume log rows %d, want one per order (%d)", rows, orders)
	}
	c := e.outboxCounts()
	t.Logf("%d orders WAITING_PAY exactly once; outbox %v; relay publishes %v", orders, c,
		app.metric(t, "stampede_relay_publishes_total", `outcome="acked"`))
	if c["NEW"]+c["RETRY"]+c["SENDING"] > 0 {
		t.Errorf("outbox rows stuck: %v", c)
	}
}

// saleThroughRabbitFault is the steady sale of the failover tests (8
// workers, 5ms pace, retrying 503s) with fail run once a third was accepted.
func (e *env) saleThroughRabbitFault(pid int64, n int, fail func()) ([]*intent, time.Time) {
	return e.saleThroughFailover(pid, n, 15_000_000, fail)
}
