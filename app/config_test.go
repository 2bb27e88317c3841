package app

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/docs"
	"github.com/stampede-sh/stampede/pipeline"
)

var envInHelp = regexp.MustCompile(`\[\$(STAMPEDE_[A-Z0-9_]+)\]$`)

// settingFlags returns flag name → its STAMPEDE_ variable, for every common
// setting, and the flag set it came from.
func settingFlags(t *testing.T) (map[string]string, *flag.FlagSet) {
	t.Helper()
	var cfg Config
	var errs []error
	fs := newFlagSet("serve", &cfg, &errs, nil)
	out := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		m := envInHelp.FindStringSubmatch(f.Usage)
		if m == nil {
			t.Errorf("flag -%s: help %q does not end with its [$STAMPEDE_…] variable", f.Name, f.Usage)
			return
		}
		out[f.Name] = m[1]
	})
	return out, fs
}

// configRow is a row of a hand-written settings table: a variable, then its
// flag, the layout of the README's table before docs/configuration.md was
// generated from the flags.
var configRow = regexp.MustCompile("^\\| `STAMPEDE_[A-Z0-9_]+` \\| `-[a-z0-9-]+` \\|")

// configRows returns the 1-based lines of text that are rows of a
// hand-written settings table.
func configRows(text string) []int {
	var lines []int
	for i, line := range strings.Split(text, "\n") {
		if configRow.MatchString(line) {
			lines = append(lines, i+1)
		}
	}
	return lines
}

// TestOneConfigurationReference keeps the settings in one place: the page
// generated from the flags (TestConfigurationPage). README.md must link it,
// and no other page may hold a hand-written copy of its table, which would
// drift from the flags unnoticed.
func TestOneConfigurationReference(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "](docs/configuration.md)") {
		t.Error("README.md does not link docs/configuration.md")
	}
	pages, err := docs.Pages("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		if page == "docs/configuration.md" {
			continue
		}
		raw, err := os.ReadFile("../" + page)
		if err != nil {
			t.Fatal(err)
		}
		if rows := configRows(string(raw)); len(rows) > 0 {
			t.Errorf("%s: lines %v are a hand-written settings table; link docs/configuration.md instead", page, rows)
		}
	}
}

// The check finds a hand-written row, and only that.
func TestConfigRowsFindsATable(t *testing.T) {
	text := "| variable | flag | default |\n|---|---|---|\n| `STAMPEDE_HTTP_ADDR` | `-http-addr` | `127.0.0.1:8080` |\n" +
		"| `STAMPEDE_JWT_JWKS_URL` | `https` only | `http` accepted |\n"
	if got := configRows(text); len(got) != 1 || got[0] != 3 {
		t.Fatalf("configRows = %v, want [3]", got)
	}
}

// TestHelpNamesEveryVariable checks `stampede <command> -h`: each flag is
// printed with its variable and the command's summary comes first.
func TestHelpNamesEveryVariable(t *testing.T) {
	flags, _ := settingFlags(t)
	for _, cmd := range []string{"serve", "demo", "migrate", "reconcile"} { // token: TestTokenHelpListsItsOwnFlags
		var cfg Config
		var errs []error
		fs := newFlagSet(cmd, &cfg, &errs, nil)
		var out bytes.Buffer
		fs.SetOutput(&out)
		if err := fs.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s -h: %v", cmd, err)
		}
		help := out.String()
		if !strings.HasPrefix(help, "Usage: stampede "+cmd+" [flags]") {
			t.Errorf("%s -h starts with %q", cmd, help[:min(60, len(help))])
		}
		for name, env := range flags {
			if !strings.Contains(help, "-"+name) || !strings.Contains(help, "[$"+env+"]") {
				t.Errorf("%s -h does not show -%s with [$%s]", cmd, name, env)
			}
		}
	}
	var out bytes.Buffer
	usage(&out)
	for _, c := range commands {
		if !strings.Contains(out.String(), c.Name) {
			t.Errorf("stampede --help lacks command %s", c.Name)
		}
	}
}

func TestPprofAndMetricsAddrValidated(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--pprof-addr", "6060"},
		{"serve", "--metrics-addr", "nonsense"},
		{"serve", "--shutdown-timeout", "10ms"},
		{"serve", "--reconcile-interval", "-1s"},
	} {
		if _, err := parse(args[0], args[1:], nil); err == nil || !strings.Contains(err.Error(), "invalid config") {
			t.Errorf("%v: %v", args, err)
		}
	}
	cfg, err := parse("serve", []string{"--pprof-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--reconcile-interval", "0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PprofAddr != "127.0.0.1:0" || cfg.ReconcileInterval != 0 {
		t.Errorf("parsed %+v", cfg)
	}
}

// The writer batch flag and WriterConfig.Validate share one limit,
// pipeline.MaxWriterBatch (issue 18 item 6): what the flag accepts, the
// writer accepts, and one above is refused by both.
func TestWriterBatchLimitMatchesPipeline(t *testing.T) {
	max := strconv.Itoa(pipeline.MaxWriterBatch)
	cfg, err := parse("serve", []string{"--writer-batch", max}, nil)
	if err != nil || cfg.WriterBatch != pipeline.MaxWriterBatch {
		t.Fatalf("--writer-batch %s: %v", max, err)
	}
	wc := pipeline.WriterConfig{Group: "g", Consumer: "c", BatchSize: cfg.WriterBatch, BatchWait: time.Millisecond, ClaimIdle: time.Second,
		ClaimInterval: time.Second, StreamRefresh: time.Second, IdlePoll: time.Second, FlushTimeout: time.Second,
		RetryMin: time.Millisecond, RetryMax: time.Second, DeadMaxLen: 1}
	if err := wc.Validate(); err != nil {
		t.Fatalf("the writer refuses what the flag accepts: %v", err)
	}
	over := strconv.Itoa(pipeline.MaxWriterBatch + 1)
	if _, err := parse("serve", []string{"--writer-batch", over}, nil); err == nil || !strings.Contains(err.Error(), max) {
		t.Fatalf("--writer-batch %s: %v, want an error naming the limit %s", over, err, max)
	}
	wc.BatchSize = pipeline.MaxWriterBatch + 1
	if err := wc.Validate(); err == nil {
		t.Fatal("the writer accepts a batch above MaxWriterBatch")
	}
	if _, err := parse("serve", []string{"--redis-check-interval", "10ms"}, nil); err == nil {
		t.Fatal("--redis-check-interval 10ms accepted")
	}
}

// TestEnvValuesParsed checks each kind of setting read from its variable: a
// valid value becomes the flag's default, a malformed one is reported with
// the variable's name and leaves the code's default.
func TestEnvValuesParsed(t *testing.T) {
	t.Setenv("STAMPEDE_WRITER_WAIT", "7ms")
	t.Setenv("STAMPEDE_WRITER_BATCH", "123")
	t.Setenv("STAMPEDE_NODE_ID", "42")
	t.Setenv("STAMPEDE_MIGRATE", "true")
	t.Setenv("STAMPEDE_RATE_USER", "2.5")
	t.Setenv("STAMPEDE_CURRENCY", "EUR")
	var cfg Config
	var errs []error
	newFlagSet("serve", &cfg, &errs, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if cfg.WriterWait != 7*time.Millisecond || cfg.WriterBatch != 123 || cfg.NodeID != 42 || !cfg.Migrate || cfg.RateUser != 2.5 || cfg.Currency != "EUR" {
		t.Fatalf("valid variables not applied: wait %s batch %d node %d migrate %v rate %v currency %q",
			cfg.WriterWait, cfg.WriterBatch, cfg.NodeID, cfg.Migrate, cfg.RateUser, cfg.Currency)
	}

	t.Setenv("STAMPEDE_WRITER_WAIT", "soon")
	t.Setenv("STAMPEDE_WRITER_BATCH", "many")
	t.Setenv("STAMPEDE_NODE_ID", "x")
	t.Setenv("STAMPEDE_MIGRATE", "maybe")
	t.Setenv("STAMPEDE_RATE_USER", "fast")
	cfg, errs = Config{}, nil
	newFlagSet("serve", &cfg, &errs, nil)
	got := errors.Join(errs...).Error()
	for _, want := range []string{
		`STAMPEDE_WRITER_WAIT="soon": time: invalid duration "soon"`,
		`STAMPEDE_WRITER_BATCH="many": not an integer`,
		`STAMPEDE_NODE_ID="x": not an integer`,
		`STAMPEDE_MIGRATE="maybe": not a boolean`,
		`STAMPEDE_RATE_USER="fast": not a number`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errors %q lack %q", got, want)
		}
	}
	if len(errs) != 5 {
		t.Errorf("%d errors, want 5: %v", len(errs), errs)
	}
	if cfg.WriterWait != 20*time.Millisecond || cfg.WriterBatch != 500 || cfg.NodeID != -1 || cfg.Migrate || cfg.RateUser != 20 {
		t.Errorf("malformed variables did not leave the defaults: wait %s batch %d node %d migrate %v rate %v",
			cfg.WriterWait, cfg.WriterBatch, cfg.NodeID, cfg.Migrate, cfg.RateUser)
	}
}
