package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stampede-sh/stampede/docs"
)

// TestDocsCommands: every stampede command quoted in a shell block of the
// pages (docs.ShellCommands: README.md, docs/*.md, bench/README.md,
// client/README.md) answers `stampede <command> [<subcommand>] --help`,
// run through the binary's own command table.
func TestDocsCommands(t *testing.T) {
	pages, err := docs.Pages("../..")
	if err != nil {
		t.Fatal(err)
	}
	problems, checked := checkDocsCommands(t, "../..", pages)
	for _, p := range problems {
		t.Error(p)
	}
	if checked == 0 {
		t.Fatal("no stampede command found in the pages' shell blocks")
	}
}

// The check fails on a command the binary does not have (the fixture of
// package docs quotes `./bin/stampede nosuchcommand` on line 28).
func TestDocsCommandsFail(t *testing.T) {
	const site = "../../docs/testdata/site"
	pages, err := docs.Pages(site)
	if err != nil {
		t.Fatal(err)
	}
	problems, checked := checkDocsCommands(t, site, pages)
	if len(problems) != 1 || problems[0].Line != 28 || !strings.Contains(problems[0].Msg, `unknown command "nosuchcommand"`) {
		t.Fatalf("problems %v, want the unknown command of README.md:28", problems)
	}
	if checked != 4 { // token, serve, dlq list, nosuchcommand
		t.Errorf("%d commands checked, want 4", checked)
	}
}

// checkDocsCommands runs `<subcommand…> --help` for every stampede command
// of pages (each distinct one once) and returns those that fail, and how
// many it ran. The usage texts they print go to /dev/null.
func checkDocsCommands(t *testing.T, root string, pages []string) ([]docs.Problem, int) {
	t.Helper()
	cmds, err := docs.ShellCommands(root, pages)
	if err != nil {
		t.Fatal(err)
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = devNull // not parallel: no other test runs meanwhile
	defer func() { os.Stderr = stderr; devNull.Close() }()

	var out []docs.Problem
	answered := map[string]error{}
	for _, c := range cmds {
		sub := c.Subcommand()
		if c.Tool != "stampede" || len(sub) == 0 {
			continue
		}
		key := strings.Join(sub, " ")
		err, seen := answered[key]
		if !seen {
			err = run(context.Background(), append(slices.Clone(sub), "--help"), io.Discard)
			if errors.Is(err, flag.ErrHelp) {
				err = nil
			}
			answered[key] = err
		}
		if err != nil {
			out = append(out, docs.Problem{File: c.File, Line: c.Line, Msg: fmt.Sprintf("stampede %s --help: %v", key, err)})
		}
	}
	return out, len(answered)
}
