package systest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/pipeline"
)

// TestQuorumQueueDownNamedByReadiness (issue 27, finding 3): RabbitMQ 3.10's
// failure seen in an earlier review, on a private node: its
// rabbit_fifo_dlx_sup gone, a quorum queue with at-least-once dead-lettering
// that restarts cannot start its dead-letter worker and is `down`; every
// publish to it is nacked, while a passive declare still succeeds. The
// relay's /readyz must name the queue while it is down (before: 200, the
// failure invisible), the events wait in the outbox, and once the queue runs
// again every order reaches WAITING_PAY and /readyz is ready.
func TestQuorumQueueDownNamedByReadiness(t *testing.T) {
	t.Parallel()
	const vhost = "stampede_queue_down"
	rc, url := sharedRabbitNode(t, vhost)
	node := rc.nodes[0]
	e := newEnvFor(t, "queuedown")
	e.lockDesign = "batch" // the ORDER_CREATED publishes the down queue nacks (the writer design sends none)
	e.amqpURL, e.directAMQ = url, url
	e.serve("front", "gateway,writer", "--amqp-queue-type", "quorum")
	e.waitReady(60 * time.Second)
	back := e.serve("back", "relay,consumer", "--amqp-queue-type", "quorum")
	waitReadyz(t, back, http.StatusOK, "", time.Minute)

	// The queue's Raft member restarted without the dead-letter supervisor.
	restart := fmt.Sprintf(`{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"%s">>, queue, <<"%s">>)), S = amqqueue:get_pid(Q), `+
		`ok = ra:stop_server(quorum_queues, S), ok = ra:restart_server(quorum_queues, S), ok.`, vhost, pipeline.QueueOrderCreated)
	if out, err := rc.ctl(time.Minute, node, "eval", `ok = supervisor:terminate_child(rabbit_sup, rabbit_fifo_dlx_sup), `+restart); err != nil {
		t.Fatalf("break the queue: %v %s", err, out)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		if out, err := rc.ctl(time.Minute, node, "eval", `{ok, _} = supervisor:restart_child(rabbit_sup, rabbit_fifo_dlx_sup), `+restart); err != nil {
			t.Errorf("restore the queue: %v %s", err, out)
		}
	}
	defer restore()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := rc.ctl(time.Minute, node, "list_queues", "-p", vhost, "name", "state")
		if strings.Contains(out, pipeline.QueueOrderCreated+"\tdown") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue is not down: %v\n%s", err, out)
		}
	}

	const n = 200
	pid := e.product(n)
	intents := e.sale(pid, n, 1, saleOptions{workers: 8, retry: true})
	body := waitReadyz(t, back, http.StatusServiceUnavailable, "queue "+pipeline.QueueOrderCreated+": publishes nacked", time.Minute)
	t.Logf("while the queue is down: /readyz %s", strings.TrimSpace(body))
	if c := e.outboxCounts(); c["SENT"] != 0 {
		t.Errorf("outbox while the queue was down: %v (nothing can have been sent)", c)
	}

	restore()
	end := time.Now()
	rep := e.settle(pid, end, 3*time.Minute)
	e.checkIntents(pid, intents, rep)
	waitReadyz(t, back, http.StatusOK, "", time.Minute)
	t.Logf("after the restore: ready; outbox %v; relay publishes nacked %v", e.outboxCounts(),
		back.metric(t, "stampede_relay_publishes_total", `outcome="nacked"`))
}

// waitReadyz waits until p's /readyz answers status with a body containing
// want, and returns the body.
func waitReadyz(t *testing.T, p *proc, status int, want string, limit time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		code, body := getReadyz(p)
		if code == status && strings.Contains(body, want) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s /readyz: %d %s, want %d with %q", p.name, code, body, status, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
