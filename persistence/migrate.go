package persistence

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"

	stampedesql "github.com/stampede-sh/stampede/sql"
)

func provider(db *sql.DB) (*goose.Provider, error) {
	sub, err := fs.Sub(stampedesql.Migrations, stampedesql.Dir)
	if err != nil {
		return nil, err
	}
	// Out of order: migrations are numbered on parallel branches, so a
	// database may have 0006 applied before 0003 reaches it; goose then
	// applies the missing one instead of refusing to start.
	return goose.NewProvider(goose.DialectMySQL, db, sub, goose.WithAllowOutofOrder(true))
}

// Migrate applies every pending migration of package sql, then writes the
// database's deployment identity if it has none yet (DeploymentID). It is
// idempotent: with nothing pending it changes nothing. applied lists the
// versions it ran.
func Migrate(ctx context.Context, db *sql.DB) (applied []int64, err error) {
	p, err := provider(db)
	if err != nil {
		return nil, fmt.Errorf("persistence: migrate: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("persistence: migrate: %w", err)
	}
	for _, r := range res {
		applied = append(applied, r.Source.Version)
	}
	if err := ensureDeployment(ctx, db); err != nil {
		return applied, err
	}
	return applied, nil
}

// Validate returns an error if any migration of package sql is not applied.
func Validate(ctx context.Context, db *sql.DB) error {
	p, err := provider(db)
	if err != nil {
		return fmt.Errorf("persistence: validate: %w", err)
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return fmt.Errorf("persistence: validate: %w", err)
	}
	if pending {
		return fmt.Errorf("persistence: validate: migrations pending; run `stampede migrate`")
	}
	return nil
}
