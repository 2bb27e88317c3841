package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/bench/pushbench"
)

// Event rows and --line blocks share push-<date>.md: a row after a block
// starts its table again, a row after a row does not.
func TestPushResultsFileMixesRowsAndBlocks(t *testing.T) {
	dir := t.TempDir()
	block := lineReport(pushbench.LineResult{Requested: 100000, Sockets: 19733, Moves: []pushbench.LineMove{{UpTo: 1000, Reached: 19733}}}, "1 2 3", "4 5 6")
	for _, step := range []func() error{
		func() error { return appendResult(dir, "| row 1 |") },
		func() error { return appendResult(dir, "| row 2 |") },
		func() error { return appendBlock(dir, block) },
		func() error { return appendResult(dir, "| row 3 |") },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "push-"+time.Now().UTC().Format("2006-01-02")+".md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	if n := strings.Count(md, eventsHeader); n != 2 {
		t.Fatalf("events header %d times, want 2:\n%s", n, md)
	}
	if !strings.Contains(md, "| row 1 |\n| row 2 |\n") || !strings.HasSuffix(md, "|---|---|---|---|---|---|---|---|---|---|\n| row 3 |\n") {
		t.Fatalf("rows out of their tables:\n%s", md)
	}
	if !strings.Contains(md, "| 19733 | 0 |") || !strings.Contains(md, "| 1 | 1000 |") || !strings.Contains(md, "load average 1 2 3 at the start") {
		t.Fatalf("line block missing its figures:\n%s", md)
	}
}
