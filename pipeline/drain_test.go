package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stampede-sh/stampede/pipeline"
)

// TestWriterDrainsDeliveredEntriesOnStop cancels a writer in the middle of a
// backlog: every entry Redis delivered to it is written and acknowledged
// before Run returns, so nothing is left pending under its name for another
// writer to reclaim only after ClaimIdle; what it never read stays in the
// stream for the next writer.
func TestWriterDrainsDeliveredEntriesOnStop(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(3000, 3000)
	e.reserve(p, k, 1, 3000, 1)
	reg := prometheus.NewRegistry()
	m := pipeline.NewMetrics(reg)
	w := e.writer(pipeline.WriterConfig{Consumer: "draining", BatchSize: 50, BatchWait: time.Second, ClaimIdle: time.Hour, Metrics: m})
	e.own(w, reg)
	stop := run(t, "writer", w.Run)
	e.waitCount(20*time.Second, 1, `SELECT LEAST(COUNT(*), 1) FROM order_info WHERE product_id = ?`, p.ID)
	stop()

	pending, err := e.rdb.XPending(ctx, k.Intake(), "writers").Result()
	if err != nil || pending.Count != 0 {
		t.Fatalf("entries left pending after the writer stopped: %+v %v", pending, err)
	}
	left, err := e.rdb.XLen(ctx, k.Intake()).Result()
	if err != nil {
		t.Fatal(err)
	}
	written := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ?`, p.ID)
	if written+left != 3000 {
		t.Errorf("%d written + %d still in the stream, want 3000", written, left)
	}
	t.Logf("stopped after writing %d of 3000; %d wait in the stream", written, left)
	st := e.writerStats(w)
	if st.Written != written {
		t.Errorf("stats %+v, want %d written", st, written)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var metricWritten float64
	var batches uint64
	for _, f := range fams {
		for _, mm := range f.GetMetric() {
			switch f.GetName() {
			case "stampede_writer_entries_total":
				if label(mm, "outcome") == "written" {
					metricWritten = mm.GetCounter().GetValue()
				}
			case "stampede_writer_batch_entries":
				batches = mm.GetHistogram().GetSampleCount()
			}
		}
	}
	if metricWritten != float64(written) || batches != uint64(st.Batches) {
		t.Errorf("metrics: written %v (want %d), batch samples %d (want %d)", metricWritten, written, batches, st.Batches)
	}

	// The next writer takes the rest at once.
	w2 := e.writer(pipeline.WriterConfig{Consumer: "next", BatchSize: 500, ClaimIdle: time.Hour})
	run(t, "writer 2", w2.Run)
	e.waitCount(20*time.Second, 3000, `SELECT COUNT(*) FROM order_info WHERE product_id = ?`, p.ID)
	waitNoPending(t, e, k.Intake())
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
