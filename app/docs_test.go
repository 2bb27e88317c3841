package app

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/stampede-sh/stampede/docs"
)

// TestDocsCommands: every stampede command quoted in a shell block of the
// pages (docs.ShellCommands: README.md, docs/*.md, bench/README.md,
// client/README.md) answers `stampede <command> [<subcommand>] --help`,
// run through the binary's own command table.
func TestDocsCommands(t *testing.T) {
	pages, err := docs.Pages("..")
	if err != nil {
		t.Fatal(err)
	}
	problems, checked := checkDocsCommands(t, "..", pages)
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
	const site = "../docs/testdata/site"
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
// of pages (each distinct one once, docs.CheckCommands) and returns those
// that fail, and how many it ran.
func checkDocsCommands(t *testing.T, root string, pages []string) ([]docs.Problem, int) {
	t.Helper()
	problems, checked, err := docs.CheckCommands(root, pages, "stampede", func(args []string) error {
		return run(context.Background(), args, io.Discard)
	})
	if err != nil {
		t.Fatal(err)
	}
	return problems, checked
}
