package app

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

// `stampede version` prints the module version, the commit and the Go
// version; build information without VCS stamping says so.
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "stampede ") || !strings.HasPrefix(lines[1], "commit ") ||
		!strings.HasPrefix(lines[2], "go1.") {
		t.Fatalf("version output:\n%s", out.String())
	}
	if err := run(context.Background(), []string{"version", "extra"}, &bytes.Buffer{}); !errors.Is(err, errUsage) {
		t.Fatalf("version extra: %v", err)
	}

	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/stampede-sh/stampede", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"},
			{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-12-01T15:00:00Z"},
			{Key: "vcs.modified", Value: "true"}}}
	want := "stampede v1.4.0\ncommit 0123456789abcdef (2026-12-01T15:00:00Z, modified)\ngo1.26.8 linux/amd64\n"
	if got := versionText(stamped, true); got != want {
		t.Errorf("stamped:\n%s\nwant:\n%s", got, want)
	}
	devel := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	if got := versionText(devel, true); !strings.HasPrefix(got, "stampede (devel)\ncommit unknown (") {
		t.Errorf("unstamped: %q", got)
	}
	if got := versionText(nil, false); !strings.Contains(got, "unknown version") || !strings.Contains(got, "commit unknown") {
		t.Errorf("no build info: %q", got)
	}
}

// `stampede token -h` lists the token command's flags and the two settings
// it reads, not every setting of the binary; the others are still accepted.
func TestTokenHelpListsItsOwnFlags(t *testing.T) {
	var (
		cfg   Config
		errs  []error
		user  int64
		admin bool
		ttl   time.Duration
	)
	fs := newFlagSet("token", &cfg, &errs, tokenFlags(&user, &admin, &ttl))
	var out bytes.Buffer
	fs.SetOutput(&out)
	if err := fs.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	help := out.String()
	for _, f := range []string{"-user", "-admin", "-ttl", "-jwt-secret", "[$STAMPEDE_JWT_SECRET]", "-mode", "[$STAMPEDE_MODE]"} {
		if !strings.Contains(help, f) {
			t.Errorf("token -h lacks %s:\n%s", f, help)
		}
	}
	for _, f := range []string{"-redis-addr", "-mysql-dsn", "-http-addr", "-writer-batch", "STAMPEDE_AMQP_URL"} {
		if strings.Contains(help, f) {
			t.Errorf("token -h shows %s, a setting token does not read", f)
		}
	}
	if n, want := strings.Count(help, "\n  -"), 3+len(commandSettings["token"]); n != want {
		t.Errorf("token -h lists %d flags, want %d:\n%s", n, want, help)
	}
	// A shared flag list still works.
	var tok bytes.Buffer
	if err := run(context.Background(), []string{"token", "--user", "7", "--redis-addr", "127.0.0.1:1"}, &tok); err != nil ||
		strings.Count(strings.TrimSpace(tok.String()), ".") != 2 {
		t.Fatalf("token with another setting's flag: %v %q", err, tok.String())
	}
}

// The default output of `stampede reconcile` is a table: a row per product,
// the outbox, every failed check and the verdict.
func TestReconcileTable(t *testing.T) {
	fail := pipeline.Check{Name: "2 redis = total - live", OK: false, Detail: "redis 7, want 8"}
	ok := pipeline.Check{Name: "1 stock never negative", OK: true, Detail: "redis 7, mysql 8"}
	rep := pipeline.Report{
		Products: []pipeline.ProductAudit{
			{ProductID: 1, Name: "Flash widget", Total: 10, Adjust: -1, RedisAvailable: 7, MySQL: persistence.Stock{Available: 8, Locked: 1, Sold: 0},
				IntakeBacklog: 0, Drift: -1, Checks: []pipeline.Check{ok, fail}},
			{ProductID: 22, Name: "Tab\tname", Total: 5, RedisAvailable: 5, MySQL: persistence.Stock{Available: 5}, Checks: []pipeline.Check{ok}},
			{ProductID: 3, Name: "broken", Error: "available is not an integer", Checks: []pipeline.Check{{Name: "0 product data readable", Detail: "x"}}},
		},
		Outbox: map[string]int64{"SENT": 12, "NEW": 1}, OutboxPending: 1, OutboxOldest: 1500 * time.Millisecond,
	}
	var out bytes.Buffer
	if err := writeReconcileTable(&out, rep); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	lines := strings.Split(got, "\n")
	header := lines[0]
	for _, col := range []string{"PRODUCT", "NAME", "TOTAL", "REDIS AVAIL", "MYSQL AVAIL", "LOCKED", "SOLD", "DRIFT", "CHECKS"} {
		if !strings.Contains(header, col) {
			t.Errorf("header %q lacks %s", header, col)
		}
	}
	// Columns line up: each row's DRIFT value starts where the header's does.
	col := strings.Index(header, "DRIFT")
	if !strings.HasPrefix(lines[1][col:], "-1 ") || !strings.HasPrefix(lines[2][col:], "0 ") {
		t.Errorf("DRIFT column not aligned:\n%s", got)
	}
	for _, want := range []string{"Flash widget", "1 FAILED", "Tab name", "ERROR available is not an integer",
		"Outbox: NEW 1, SENT 12; 1 pending, the oldest 1.5s old", "FAIL product 1: 2 redis = total - live (redis 7, want 8)",
		"NOT OK: 2 checks failed"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	rep = pipeline.Report{OK: true}
	out.Reset()
	if err := writeReconcileTable(&out, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "(no products)") || !strings.Contains(out.String(), "OK: every invariant holds") {
		t.Errorf("empty report:\n%s", out.String())
	}
}
