// Package sql holds Stampede's versioned schema migrations
// (migrations/NNNN_name.sql, goose format with -- +goose Up/Down sections),
// embedded so the binary can apply them with `stampede migrate`. The runner
// lives in persistence; this package only owns the files.
package sql

import "embed"

// Migrations is the migrations folder; file names sort in version order.
//
//go:embed migrations/*.sql
var Migrations embed.FS

// Dir is the folder inside Migrations that holds the files.
const Dir = "migrations"
