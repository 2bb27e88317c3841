package main

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

// TestConfigTableMatchesFlags keeps README.md's configuration table in sync
// with the flags: the same variables, each with its flag, and the same
// default where the table gives a literal one.
func TestConfigTableMatchesFlags(t *testing.T) {
	flags, fs := settingFlags(t)
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(STAMPEDE_[A-Z0-9_]+)` \\| `-([a-z0-9-]+)` \\| ([^|]*) \\|")
	table := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		env, name, def := m[1], m[2], strings.TrimSpace(m[3])
		table[env] = name
		if flags[name] != env {
			t.Errorf("README: %s is documented with -%s, but that flag reads %q", env, name, flags[name])
			continue
		}
		if _, set := os.LookupEnv(env); set {
			continue // the flag's default is the environment's value
		}
		f := fs.Lookup(name)
		want, literal := strings.CutPrefix(def, "`")
		if def == "empty" {
			want, literal = "", true
		} else if literal {
			want, literal = strings.CutSuffix(want, "`")
			literal = literal && !strings.Contains(want, "`")
		}
		if !literal {
			continue // prose such as "a development key" or "all"
		}
		dw, errW := time.ParseDuration(want)
		dg, errG := time.ParseDuration(f.DefValue)
		if errW == nil && errG == nil {
			if dw != dg {
				t.Errorf("README: %s default %s, flag default %s", env, want, f.DefValue)
			}
			continue
		}
		if want != f.DefValue {
			t.Errorf("README: %s default %q, flag default %q", env, want, f.DefValue)
		}
	}
	for name, env := range flags {
		if _, ok := table[env]; !ok {
			t.Errorf("README configuration table lacks %s (-%s)", env, name)
		}
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
		if !strings.Contains(out.String(), c.name) {
			t.Errorf("stampede --help lacks command %s", c.name)
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
