package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

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
	} else {
		for _, p := range rep.Products {
			if p.Error != "" {
				fmt.Fprintf(stdout, "product %d %q: ERROR %s\n", p.ProductID, p.Name, p.Error)
				continue
			}
			fmt.Fprintf(stdout, "product %d %q: redis %d, mysql available %d locked %d sold %d, total %d, drift %d\n",
				p.ProductID, p.Name, p.RedisAvailable, p.MySQL.Available, p.MySQL.Locked, p.MySQL.Sold, p.Total, p.Drift)
		}
		fmt.Fprintf(stdout, "outbox: %v\n", rep.Outbox)
		for _, f := range rep.Failed() {
			fmt.Fprintln(stdout, "FAIL", f)
		}
	}
	if !rep.OK {
		return errors.New("reconcile: invariants do not hold (a running sale may not be idle yet)")
	}
	return nil
}
