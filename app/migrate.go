package app

import (
	"context"
	"fmt"
	"io"

	"github.com/stampede-sh/stampede/persistence"
)

func runMigrate(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parse("migrate", args, nil)
	if err != nil {
		return err
	}
	store, err := persistence.Open(ctx, cfg.MySQLDSN)
	if err != nil {
		return err
	}
	defer store.Close()
	applied, err := persistence.Migrate(ctx, store.DB)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "migrate: schema up to date")
	} else {
		fmt.Fprintf(stdout, "migrate: applied versions %v\n", applied)
	}
	id, err := store.DeploymentID(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrate: deployment identity %s (docs/production.md, \"Deployment identity\")\n", id)
	return nil
}
