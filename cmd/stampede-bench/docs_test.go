package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/stampede-sh/stampede/app"
	"github.com/stampede-sh/stampede/docs"
)

// TestDocsCommands: every stampede-bench command quoted in a shell block of
// the pages answers `stampede-bench <command> --help`, run through this
// binary's command table (package app's TestDocsCommands checks the
// stampede commands, and that the check fails on an unknown one).
func TestDocsCommands(t *testing.T) {
	const root = "../.."
	pages, err := docs.Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	problems, checked, err := docs.CheckCommands(root, pages, "stampede-bench", func(args []string) error {
		return app.Run(context.Background(), args, io.Discard)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if checked == 0 {
		t.Fatal("no stampede-bench command found in the pages' shell blocks")
	}
}

// TestCommands: the benchmark commands are those docs/configuration.md
// names as stampede-bench's (package app, configdoc_test.go benchCommands),
// each in development mode by default.
func TestCommands(t *testing.T) {
	var out strings.Builder
	if err := app.Run(context.Background(), []string{"--help"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bench", "bench-scale", "bench-push"} {
		if !strings.Contains(out.String(), "\n  "+name+" ") {
			t.Errorf("stampede-bench --help lacks %s:\n%s", name, out.String())
		}
		cfg, err := app.Parse(name, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Mode != app.ModeDevelopment {
			t.Errorf("%s runs in mode %q by default", name, cfg.Mode)
		}
	}
}
