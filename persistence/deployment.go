package persistence

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
)

// The deployment identity (issue 27). Each Stampede database names itself
// with a random UUID, written once by Migrate into the one row of table
// deployment (migration 0011). The Redis DB a deployment uses carries the
// same identity (lua.ClaimDeployment): a role started against a Redis DB
// that carries another one refuses to start, so two databases never share
// one Redis DB's stock without anyone noticing.

// DeploymentID returns the identity of this database: a UUID (36
// characters). ErrNotFound when the row is missing (migrations not applied,
// or the row deleted by hand: `stampede migrate` writes a new one).
func (s *Store) DeploymentID(ctx context.Context) (string, error) {
	var id string
	err := s.DB.QueryRowContext(ctx, `SELECT id FROM deployment WHERE singleton = 1`).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("persistence: deployment identity missing (run `stampede migrate`): %w", ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("persistence: read deployment identity: %w", err)
	}
	return id, nil
}

// ensureDeployment writes a new random identity unless the row exists.
func ensureDeployment(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `INSERT IGNORE INTO deployment (singleton, id) VALUES (1, ?)`, newUUID()); err != nil {
		return fmt.Errorf("persistence: write deployment identity: %w", err)
	}
	return nil
}

// newUUID is a random (version 4) UUID in its 36-character text form.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// newIncarnation is a product's incarnation: 32 random hex digits.
func newIncarnation() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
