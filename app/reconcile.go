package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

func runReconcile(ctx context.Context, args []string, stdout io.Writer) error {
	var asJSON bool
	cfg, err := parse("reconcile", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	})
	if err != nil {
		return err
	}
	store, err := persistence.Open(ctx, cfg.MySQLDSN)
	if err != nil {
		return err
	}
	defer store.Close()
	rdb := newRedis(cfg)
	defer rdb.Close()
	rep, err := pipeline.Reconcile(ctx, rdb, store, nil)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := writeReconcileTable(stdout, rep); err != nil {
		return err
	}
	if !rep.OK {
		return errors.New("reconcile: invariants do not hold (a running sale may not be idle yet)")
	}
	return nil
}

// writeReconcileTable prints rep for a person: one row per product (units;
// drift is Redis available − (total + adjust − live units), 0 when in sync),
// the outbox by status, then every failed check and the verdict.
func writeReconcileTable(w io.Writer, rep pipeline.Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PRODUCT\tNAME\tTOTAL\tADJUST\tREDIS AVAIL\tMYSQL AVAIL\tLOCKED\tSOLD\tBACKLOG\tDRIFT\tCHECKS")
	for _, p := range rep.Products {
		if p.Error != "" {
			fmt.Fprintf(tw, "%d\t%s\t-\t-\t-\t-\t-\t-\t-\t-\tERROR %s\n", p.ProductID, cell(p.Name), cell(p.Error))
			continue
		}
		failed := 0
		for _, c := range p.Checks {
			if !c.OK {
				failed++
			}
		}
		verdict := "ok"
		if failed > 0 {
			verdict = fmt.Sprintf("%d FAILED", failed)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", p.ProductID, cell(p.Name), p.Total, p.Adjust,
			p.RedisAvailable, p.MySQL.Available, p.MySQL.Locked, p.MySQL.Sold, p.IntakeBacklog, p.Drift, verdict)
	}
	if len(rep.Products) == 0 {
		fmt.Fprintln(tw, "(no products)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	statuses := make([]string, 0, len(rep.Outbox))
	for st := range rep.Outbox {
		statuses = append(statuses, st)
	}
	slices.Sort(statuses)
	parts := make([]string, len(statuses))
	for i, st := range statuses {
		parts[i] = st + " " + strconv.FormatInt(rep.Outbox[st], 10)
	}
	if len(parts) == 0 {
		parts = []string{"empty"}
	}
	fmt.Fprintf(w, "\nOutbox: %s; %d pending, the oldest %s old\n", strings.Join(parts, ", "), rep.OutboxPending,
		rep.OutboxOldest.Round(time.Millisecond))
	failed := rep.Failed()
	for _, f := range failed {
		fmt.Fprintln(w, "FAIL", f)
	}
	if rep.OK {
		fmt.Fprintln(w, "OK: every invariant holds")
	} else {
		fmt.Fprintf(w, "NOT OK: %d checks failed\n", len(failed))
	}
	return nil
}

// cell makes s one table cell: no tabs or line breaks.
func cell(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}
