package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/stampede-sh/stampede/app"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/bench/pushbench"
)

// lineFlags are bench-push's flags of the waiting-room run (--line).
type lineFlags struct {
	line      bool
	sockets   int
	moves     int
	perClient int
	sources   int
	interval  time.Duration
	client    string // internal: run as a client process of a --line run
	profile   string
}

func (lf *lineFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&lf.line, "line", false, "run the waiting room at sale-day scale instead (issue 28): --sockets sockets on a hub in this process follow one line, which moves --moves times")
	fs.IntVar(&lf.sockets, "sockets", pushbench.TargetLineSockets, "with --line: sockets, one user each, opened by child processes (reduced if this process's fd limit is too low)")
	fs.IntVar(&lf.moves, "moves", 5, "with --line: moves of the line, each a new place for every socket")
	fs.IntVar(&lf.perClient, "per-client", 10000, "with --line: sockets per client process")
	fs.IntVar(&lf.sources, "sources", 0, "with --line: loopback source addresses 127.0.0.2… the clients bind to (0: one per 25,000 sockets, below the ephemeral port range)")
	fs.DurationVar(&lf.interval, "move-interval", 3*time.Second, "with --line: time between two moves")
	fs.StringVar(&lf.profile, "line-cpuprofile", "", "with --line: write a CPU profile of the push hub's process over the moves to this file")
	fs.StringVar(&lf.client, "line-client", "", "internal: run as a client process of a --line run (JSON config)")
}

// benchLine runs pushbench.RunLine with child processes of this binary as
// the clients, prints the result and appends it to push-<date>.md.
func benchLine(ctx context.Context, cfg *app.Config, lf lineFlags, resultsDir string, stdout io.Writer) error {
	if lf.sockets < 1 || lf.moves < 1 || lf.perClient < 1 || lf.sources < 0 {
		return fmt.Errorf("%w: --sockets, --moves and --per-client must be positive", app.ErrUsage)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench-push: find own binary: %w", err)
	}
	load0 := loadAverage()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "bench-push: "+f+"\n", a...) }
	res, err := pushbench.RunLine(ctx, pushbench.LineConfig{
		JWTSecret:  cfg.JWTSecret,
		Verifier:   auth.NewVerifierCache([]byte(cfg.JWTSecret), app.TokenCache(cfg.TokenCache)), // as serve's
		CPUProfile: lf.profile,
		Sockets:    lf.sockets, Updates: lf.moves, Interval: lf.interval, PerClient: lf.perClient, Sources: lf.sources,
		ClientCommand: func(arg string) *exec.Cmd {
			c := exec.Command(self, "bench-push", "--line-client", arg)
			c.Env = append(os.Environ(), "STAMPEDE_MODE="+app.ModeDevelopment)
			return c
		},
		Logf: logf,
	})
	if err != nil {
		return err
	}
	block := lineReport(res, load0, loadAverage())
	fmt.Fprint(stdout, block)
	js, _ := json.MarshalIndent(res, "", "  ")
	fmt.Fprintln(stdout, string(js))
	if resultsDir == "" {
		return nil
	}
	return appendBlock(resultsDir, block)
}

// lineReport is the Markdown block of one --line run.
func lineReport(r pushbench.LineResult, load0, load1 string) string {
	var b strings.Builder
	now := time.Now().UTC().Format(time.RFC3339)
	fmt.Fprintf(&b, "\n## Waiting room at sale-day scale, %s (issue 28)\n\n", now)
	fmt.Fprintf(&b, "Command: `stampede %s`. One push hub in the bench process (the measured process); %d client processes of the same binary, %d loopback source addresses. "+
		"Machine: %d cores shared with other engineers' builds and tests, load average %s at the start, %s at the end.\n\n",
		strings.Join(os.Args[1:], " "), r.Clients, r.Sources, runtime.NumCPU(), load0, load1)
	if r.Note != "" {
		fmt.Fprintf(&b, "Note: %s.\n\n", r.Note)
	}
	fmt.Fprintf(&b, "Targets: %s sockets held; ≤ %.0f KB push RSS per socket; every move reaches every socket within %v.\n\n",
		"100,000", pushbench.TargetLineKBPerSocket, pushbench.TargetLineFanout)
	fmt.Fprintln(&b, "| sockets held | failed | heap KB/socket | stacks KB/socket | RSS KB/socket | RSS KB/socket after the moves | goroutines | reached | p50 ms | p99 ms | max ms | 100k held | ≤ 20 KB | ≤ 2 s to all |")
	fmt.Fprintln(&b, "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|---|")
	fmt.Fprintf(&b, "| %d | %d | %.1f | %.1f | %.1f | %.1f | %d → %d | %d/%d | %.1f | %.1f | %.1f | %s | %s | %s |\n\n",
		r.Sockets, r.Failed, r.HeapKBPerSocket, r.StackKBPerSock, r.RSSKBPerSocket, r.RSSKBAfterMoves,
		r.Goroutines0, r.Goroutines1, r.Reached, r.Expected, r.P50Ms, r.P99Ms, r.MaxMs,
		yesNo(r.ScaleTargetMet), yesNo(r.MemoryTargetMet), yesNo(r.FanoutTargetMet))
	fmt.Fprintln(&b, "| move | upTo | PublishLine ms | reached | wrong | p50 ms | p99 ms | max ms |")
	fmt.Fprintln(&b, "|--:|--:|--:|--:|--:|--:|--:|--:|")
	for i, m := range r.Moves {
		fmt.Fprintf(&b, "| %d | %d | %.1f | %d | %d | %.1f | %.1f | %.1f |\n", i+1, m.UpTo, m.PublishMs, m.Reached, m.Wrong, m.P50Ms, m.P99Ms, m.MaxMs)
	}
	fmt.Fprintf(&b, "\nRSS %d → %d KB with the sockets (%d KB after the moves); heap %.0f → %.0f KB, stacks %.0f → %.0f KB; connect %.1f s. "+
		"CPU over the moves: hub %.2f s (%.1f µs per place sent), client processes %.2f s.\n",
		r.RSSBeforeKB, r.RSSConnectedKB, r.RSSAfterKB, r.HeapBeforeKB, r.HeapConnectedKB, r.StackBeforeKB, r.StackConnectKB, r.ConnectSeconds,
		r.HubCPUSeconds, r.HubCPUUsPerPlace, r.ClientCPUSeconds)
	return b.String()
}

// loadAverage is /proc/loadavg's first three fields ("?" if unreadable).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// appendBlock appends a Markdown block to <dir>/push-<date>.md.
func appendBlock(dir, block string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "push-"+time.Now().UTC().Format("2006-01-02")+".md")
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if os.IsNotExist(statErr) {
		fmt.Fprint(f, "# Push benchmark\n")
	}
	fmt.Fprint(f, block)
	return f.Close()
}
