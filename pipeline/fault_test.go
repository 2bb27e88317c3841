package pipeline_test

import (
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// MySQL unreachable: the writer keeps retrying and acknowledges nothing; the
// entries stay pending and are written once a working writer takes over.
func TestWriterLosesNothingWhileMySQLIsDown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(100, 100)
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/nowhere?timeout=200ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	m, reg := e.metrics()
	down, err := pipeline.NewWriter(&persistence.Store{DB: db}, e.rdb, pipeline.WriterConfig{Consumer: "w-1", ClaimIdle: time.Hour,
		RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, FlushTimeout: 300 * time.Millisecond, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	e.own(down, reg)
	stop := run(t, "writer (mysql down)", down.Run)
	e.reserve(p, k, 1, 30, 1)
	pipelinetest.WaitFor(t, 10*time.Second, "failed flushes", func() (bool, string) {
		st := e.writerStats(down)
		return st.Failures >= 3, fmt.Sprintf("%+v", st)
	})
	stop()
	pending, err := e.rdb.XPending(ctx, k.Intake(), "writers").Result()
	if err != nil || pending.Count != 30 {
		t.Fatalf("pending after the failed writer stopped: %+v %v", pending, err)
	}
	if n, _ := e.rdb.XLen(ctx, k.Intake()).Result(); n != 30 {
		t.Fatalf("stream length %d, want 30", n)
	}
	// MySQL is back (a working store); the restarted writer finds its own
	// pending entries.
	up := e.writer(pipeline.WriterConfig{Consumer: "w-1", ClaimIdle: time.Hour})
	run(t, "writer", up.Run)
	e.waitCount(10*time.Second, 30, `SELECT COUNT(*) FROM order_info`)
	waitNoPending(t, e, k.Intake())
}

// RabbitMQ unreachable: the relay claims nothing, so rows stay NEW with
// their retry budget intact.
func TestRelayDoesNotClaimWithoutBroker(t *testing.T) {
	e := newEnv(t)
	e.appendOutbox("ev", 5, "stampede.events", "order.created")
	conn, err := pipeline.NewConn(pipeline.ConnConfig{URL: "amqp://guest:guest@127.0.0.1:1/", MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	m, reg := e.metrics()
	r, err := pipeline.NewRelay(e.store, conn, pipeline.RelayConfig{PollInterval: 10 * time.Millisecond, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	e.own(r, reg)
	stop := run(t, "relay", r.Run)
	time.Sleep(300 * time.Millisecond)
	stop()
	if n := e.count(`SELECT COUNT(*) FROM mq_outbox WHERE status = 'NEW' AND retry_count = 0`); n != 5 {
		t.Errorf("%d rows untouched, want 5", n)
	}
}

// The broker drops every connection mid-sale: relay and consumer reconnect
// and the orders accepted afterwards still reach WAITING_PAY.
func TestPipelineSurvivesDroppedConnections(t *testing.T) {
	e := newEnv(t)
	p, k := e.product(100, 100)
	_, r, _ := startPipeline(e, pipeline.ConsumerConfig{})
	e.reserve(p, k, 1, 10, 1)
	e.waitCount(10*time.Second, 10, `SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`)

	out, err := exec.Command("rabbitmqctl", "close_all_connections", "-p", pipelinetest.VhostName(t, "pipeline"), "test: dropped connections").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl close_all_connections: %v\n%s", err, out)
	}
	e.reserve(p, k, 100, 10, 1)
	e.waitCount(20*time.Second, 20, `SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`)
	e.waitCount(10*time.Second, 0, `SELECT COUNT(*) FROM mq_outbox WHERE status <> 'SENT'`)
	if st := e.stock(p.ID); st.Locked != 20 || st.Available != 80 {
		t.Errorf("mysql stock %+v", st)
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'LOCK'`); n != 20 {
		t.Errorf("%d LOCK flows, want 20", n)
	}
	if st := e.relayStats(r); st.Reconnect < 1 {
		t.Logf("relay stats %+v (connections were dropped while it idled)", st)
	}
}
