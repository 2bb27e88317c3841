package pipeline_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline"
)

// A close pass also deletes SENT outbox rows older than the retention, in
// batches, and nothing else.
func TestSweeperPurgesSentOutbox(t *testing.T) {
	store := persistencetest.New(t, "sweeppurge")
	ctx := context.Background()
	err := store.WithTx(ctx, func(tx *sql.Tx) error {
		for i := range 7 {
			if _, err := persistence.AppendOutbox(ctx, tx, persistence.OutboxMessage{EventID: fmt.Sprintf("ev-%d", i), EventType: "ORDER_CREATED",
				OrderNo: "0000000000000000001001", Exchange: "x", RoutingKey: "k", Payload: []byte(`{}`)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// ev-0…4 sent two hours ago, ev-5 sent just now, ev-6 not sent.
	if _, err := store.DB.Exec(`UPDATE mq_outbox SET status = 'SENT', next_retry_at = NOW(3) - INTERVAL 2 HOUR WHERE event_id < 'ev-5'`); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB.Exec(`UPDATE mq_outbox SET status = 'SENT' WHERE event_id = 'ev-5'`); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := pipeline.NewMetrics(reg)
	s, err := pipeline.NewSweeper(store, pipeline.SweeperConfig{OutboxRetention: time.Hour, PurgeBatch: 3, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	more, err := s.Sweep(ctx)
	if err != nil || !more {
		t.Fatalf("first pass: more %v, %v (a full purge batch means more)", more, err)
	}
	if more, err = s.Sweep(ctx); err != nil || more {
		t.Fatalf("second pass: more %v, %v", more, err)
	}
	left, err := store.OutboxStatuses(ctx, []string{"ev-0", "ev-1", "ev-2", "ev-3", "ev-4", "ev-5", "ev-6"})
	if err != nil || len(left) != 2 || left["ev-5"] != "SENT" || left["ev-6"] != "NEW" {
		t.Fatalf("left %v, %v", left, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	purged := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "stampede_outbox_purged_rows_total" {
			purged = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if purged != 5 {
		t.Errorf("stampede_outbox_purged_rows_total = %v, want 5", purged)
	}
}
