// Package app is the Stampede process behind the stampede command: the
// configuration (Config, from STAMPEDE_* variables and flags), the start of
// the selected roles sharing one Redis client and one MySQL pool, and the
// commands of the stampede binary:
//
//	stampede serve [--roles gateway,writer,relay,consumer,sweeper,push] [--migrate]
//	stampede migrate
//	stampede demo [--once]
//	stampede token --user 42 [--admin]
//	stampede reconcile
//	stampede redis-takeover
//	stampede dlq list|replay [--all|--event-id X]
//
// cmd/stampede is its main; cmd/stampede-bench adds the benchmark commands
// (bench, bench-scale, bench-push) to the same commands, so that the
// production binary does not link the load generator while the benchmark
// starts, in process or as children (`serve`), the code it measures.
//
// Settings come from STAMPEDE_* environment variables, overridden by flags;
// `stampede <command> -h` lists them.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// Command is a command of a binary built on this package (Main): its name,
// its one-line summary for the usage text, and what it runs.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, args []string, stdout io.Writer) error
}

var commands []Command

func init() {
	commands = []Command{
		{"serve", "run the selected roles (all by default) until SIGINT/SIGTERM", runServe},
		{"migrate", "apply the embedded schema migrations (idempotent)", runMigrate},
		{"demo", "start every role, run a 1,000-buyer flash sale, print the audit (--once: exit after it)", runDemo},
		{"reconcile", "print the Redis ⇄ MySQL reconciliation of every product (exit 1 on drift)", runReconcile},
		{"redis-takeover", "hand a Redis DB that carries another deployment's identity to this database: refused while it holds live reservations; then deletes its Stampede keys, claims it and loads this database's products", runTakeover},
		{"dlq", "dead letters: `dlq list` shows the dead-letter queue and DEAD outbox rows, `dlq replay --all|--event-id X` re-publishes them through the outbox", runDLQ},
		{"token", "print a bearer token for a user (--admin for an admin token)", runToken},
		{"version", "print the module version, VCS commit and Go version of this binary", runVersion},
	}
}

// program is the name of the running binary in usage texts: stampede, or
// the name given to Register.
var program = "stampede"

// Register names the binary (in usage texts) and adds extra to the stampede
// commands: cmd/stampede-bench adds the benchmark's, from its init.
func Register(name string, extra ...Command) {
	program = name
	commands = append(commands, extra...)
}

// Main runs os.Args through the commands until the command returns or a
// second SIGINT/SIGTERM, and exits: 0, 1 on an error, 2 on a usage error.
func Main() {
	os.Exit(mainExit())
}

// Run runs one command line (args without the program name) as Main does,
// without the signals and the exit: for the tests of the binaries.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	return run(ctx, args, stdout)
}

// errUsage marks errors that should print the usage text.
var errUsage = errors.New("usage")

// mainExit runs os.Args and returns the exit code.
func mainExit() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// The first signal starts the drain; a second one kills at once.
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h: the usage was printed
			return 0
		}
		fmt.Fprintln(os.Stderr, program+":", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return fmt.Errorf("%w: no command", errUsage)
		}
		return nil
	}
	for _, c := range commands {
		if c.Name == args[0] {
			return c.Run(ctx, args[1:], stdout)
		}
	}
	usage(os.Stderr)
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "%s — flash-sale order system\n\nUsage: %s <command> [flags]\n\nCommands:\n", program, program)
	width := 0 // the longest command name: every summary starts in one column
	for _, c := range commands {
		width = max(width, len(c.Name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s %s\n", width, c.Name, c.Summary)
	}
	fmt.Fprintln(w, "\nRun `"+program+" <command> -h` for its flags. Every setting is read from a STAMPEDE_*")
	fmt.Fprintln(w, "environment variable (shown in brackets in each flag's help); a flag overrides it.")
	fmt.Fprintln(w, "\nPrometheus metrics: GET /metrics on the metrics listener (STAMPEDE_METRICS_ADDR; in development mode also on the gateway's port). See docs/operations.md, \"Metrics\".")
}

// parse binds the common config plus extra flags, parses args and validates.
func parse(name string, args []string, extra func(fs *flag.FlagSet)) (*Config, error) {
	var cfg Config
	var envErrs []error
	fs := newFlagSet(name, &cfg, &envErrs, extra)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		// An unknown or malformed flag is a usage error (exit 2), as for
		// every other bad command line.
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected arguments %s", errUsage, strings.Join(fs.Args(), " "))
	}
	if len(envErrs) > 0 {
		return nil, fmt.Errorf("invalid config: %w", errors.Join(envErrs...))
	}
	cfg.command, cfg.explicit = name, explicitSettings(fs)
	cfg.resolve()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// newFlagSet returns the flag set of command name: every setting of cfg
// (defaults from the environment, errors of malformed values in envErrs),
// the command's extra flags, and a usage text naming each flag's variable.
func newFlagSet(name string, cfg *Config, envErrs *[]error, extra func(fs *flag.FlagSet)) *flag.FlagSet {
	fs := flag.NewFlagSet(program+" "+name, flag.ContinueOnError)
	own := map[string]bool{} // the flags extra adds: the command's own
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: %s %s [flags]\n\n", program, name)
		for _, c := range commands {
			if c.Name == name {
				fmt.Fprintf(w, "%s.\n\n", strings.ToUpper(c.Summary[:1])+c.Summary[1:])
			}
		}
		fs.VisitAll(func(f *flag.Flag) {
			switch {
			case secretFlags[f.Name]:
				f.DefValue = ""
			case dsnFlags[f.Name]:
				f.DefValue = maskPassword(f.DefValue)
			}
		})
		reads, narrow := commandSettings[name]
		if !narrow {
			fmt.Fprintln(w, "Flags. A flag overrides the environment variable named in brackets; a default shown")
			fmt.Fprintln(w, "is the variable's value when it is set (secrets are never shown). docs/configuration.md lists them all.")
			fs.PrintDefaults()
			return
		}
		// A command that reads few settings lists its own flags and those.
		fmt.Fprintln(w, "Flags:")
		printFlags(w, fs, func(f *flag.Flag) bool { return own[f.Name] })
		fmt.Fprintln(w, "\nSettings it reads (a flag overrides the environment variable in brackets; secrets are never shown):")
		printFlags(w, fs, func(f *flag.Flag) bool { return slices.Contains(reads, f.Name) })
	}
	cfg.bind(fs, envErrs, defaultMode(name))
	if extra != nil {
		before := map[string]bool{}
		fs.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
		extra(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if !before[f.Name] {
				own[f.Name] = true
			}
		})
	}
	return fs
}

// commandSettings names the configuration settings (flags of Config.bind)
// that a command reads, for commands that read only a few: their -h lists
// their own flags and these instead of every setting. The other settings'
// flags are still accepted (and ignored), so a shared environment or flag
// list works for every command.
var commandSettings = map[string][]string{
	"token": {"mode", "jwt-secret", "jwt-hs256", "jwt-hs256-issuer", "jwt-hs256-audience", "jwt-jwks-url", "jwt-admin-group", "jwt-groups-claim"},
}

// printFlags prints the flags of fs that keep selects, as fs.PrintDefaults
// does (their DefValue as fs has it: masked by the caller).
func printFlags(w io.Writer, fs *flag.FlagSet, keep func(*flag.Flag) bool) {
	sub := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	sub.SetOutput(w)
	fs.VisitAll(func(f *flag.Flag) {
		if keep(f) {
			sub.Var(f.Value, f.Name, f.Usage)
			sub.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	sub.PrintDefaults()
}

// explicitSettings are the flags of fs given on the command line or through
// their environment variable.
func explicitSettings(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) {
		if env := settingVar(f.Usage); env != "" {
			if _, ok := os.LookupEnv(env); ok {
				set[f.Name] = true
			}
		}
	})
	return set
}

func newLogger(level string, w io.Writer) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
