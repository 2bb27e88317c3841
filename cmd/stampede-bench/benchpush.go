package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/stampede-sh/stampede/app"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stampede-sh/stampede/bench/pushbench"
)

// runBenchPush runs the issue-6 push benchmark: it starts this binary as a
// child `serve --roles push` on a free port, connects --subscribers sockets,
// publishes --events status events at --rate per second, prints the result
// (a table row and JSON), appends it to bench/results/push-<date>.md and
// stops the child.
//
// With --line it runs the waiting room at sale-day scale instead (issue 28,
// benchLine): a hub in this process, --sockets client sockets in child
// processes, the line moved --moves times.
func runBenchPush(ctx context.Context, args []string, stdout io.Writer) error {
	var subscribers, events, rate int
	var resultsDir string
	var lf lineFlags
	cfg, err := app.Parse("bench-push", args, func(fs *flag.FlagSet) {
		fs.IntVar(&subscribers, "subscribers", 10000, "concurrent WebSocket subscribers (reduced if the fd limit is too low)")
		fs.IntVar(&events, "events", 20000, "order status events to publish")
		fs.IntVar(&rate, "rate", 2000, "events published per second")
		fs.StringVar(&resultsDir, "results-dir", "bench/results", "directory of the push-<date>.md results file (empty: do not write)")
		lf.register(fs)
	})
	if err != nil {
		return err
	}
	if lf.client != "" {
		return pushbench.RunLineClient(ctx, lf.client, os.Stdin, stdout)
	}
	if lf.line {
		return benchLine(ctx, cfg, lf, resultsDir, stdout)
	}
	if subscribers < 1 || events < 1 || rate < 1 {
		return fmt.Errorf("%w: --subscribers, --events and --rate must be positive", app.ErrUsage)
	}
	load0 := loadAverage()
	addr, err := benchPushFreeAddr()
	if err != nil {
		return err
	}
	pid, stop, err := startPushChild(ctx, cfg, addr)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(os.Stderr, "bench-push: push pid %d on %s\n", pid, addr)
	res, err := pushbench.Run(ctx, pushbench.Config{
		PushURL: "ws://" + addr + "/ws", AMQPURL: cfg.AMQPURL, JWTSecret: cfg.JWTSecret,
		Subscribers: subscribers, Events: events, Rate: rate, PushPID: pid,
		Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "bench-push: "+f+"\n", a...) },
	})
	if err != nil {
		return err
	}
	return printPushResult(res, load0, resultsDir, stdout)
}

// startPushChild starts this binary as `serve --roles push` on addr with
// cfg's RabbitMQ, MySQL, Redis and JWT settings and waits until it listens
// and its hub bound its queue. stop sends SIGTERM and waits (SIGKILL after
// 30s) unless the child already exited.
func startPushChild(ctx context.Context, cfg *app.Config, addr string) (pid int, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, nil, fmt.Errorf("bench-push: find own binary: %w", err)
	}
	child := exec.Command(self, "serve", "--mode", app.ModeDevelopment, "--roles", "push", "--push-addr", addr,
		"--amqp-url", cfg.AMQPURL, "--jwt-secret", cfg.JWTSecret, "--mysql-dsn", cfg.MySQLDSN,
		"--redis-addr", cfg.RedisAddr, "--redis-db", strconv.Itoa(cfg.RedisDB), "--log-level", "error")
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		return 0, nil, fmt.Errorf("bench-push: start push: %w", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = child.Wait(); close(exited) }()
	stop = func() {
		select {
		case <-exited:
			return
		default:
		}
		child.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			child.Process.Kill()
			<-exited
		}
	}
	if err := waitListening(ctx, addr, exited); err != nil {
		select {
		case <-exited:
			err = fmt.Errorf("%w (push exited: %v)", err, waitErr)
		default:
		}
		stop()
		return 0, nil, err
	}
	time.Sleep(time.Second) // let the hub bind its RabbitMQ queue (the port opens first)
	return child.Process.Pid, stop, nil
}

// printPushResult prints res as a table row and as JSON, and appends the
// row to resultsDir's push-<date>.md ("": not written). load0 is the load
// average at the start.
func printPushResult(res pushbench.Result, load0, resultsDir string, stdout io.Writer) error {
	row := fmt.Sprintf("| %s | %d | %d/%d | %.2f | %.2f | %.2f | %.1f | %s | %s |%s",
		time.Now().UTC().Format(time.RFC3339), res.Subscribers, res.Delivered, res.Expected,
		res.P50Ms, res.P99Ms, res.MaxMs, res.KBPerConn, yesNo(res.LatencyTargetMet), yesNo(res.MemoryTargetMet),
		noteCell(strings.TrimPrefix(res.Note+"; load average "+load0+" at the start", "; ")))
	fmt.Fprintln(stdout, "| time | subscribers | delivered | p50 ms | p99 ms | max ms | KB/conn | p99 ≤ 100ms | ≤ 50KB/conn | note |")
	fmt.Fprintln(stdout, row)
	js, _ := json.MarshalIndent(res, "", "  ")
	fmt.Fprintln(stdout, string(js))
	if resultsDir != "" {
		return appendResult(resultsDir, row)
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

func noteCell(note string) string {
	return " " + note + " |"
}

// eventsHeader is the header of the event runs' table in push-<date>.md.
const eventsHeader = "| time | subscribers | delivered | p50 ms | p99 ms | max ms | KB/conn | p99 ≤ 100ms | ≤ 50KB/conn | note |"

// appendResult appends row to <dir>/push-<date>.md, with the table's header
// when the file is new or ends with something else (a --line block).
func appendResult(dir, row string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "push-"+time.Now().UTC().Format("2006-01-02")+".md")
	old, readErr := os.ReadFile(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if errors.Is(readErr, os.ErrNotExist) {
		fmt.Fprint(f, "# Push benchmark\n")
	}
	if !endsWithEventsTable(string(old)) {
		fmt.Fprint(f, "\n## Status events (issue 6)\n\nTargets: p99 ≤ 100 ms from status change to client receipt; ≤ 50 KB push RSS per connection.\n\n")
		fmt.Fprintln(f, eventsHeader)
		fmt.Fprintln(f, "|---|---|---|---|---|---|---|---|---|---|")
	}
	fmt.Fprintln(f, row)
	return f.Close()
}

// endsWithEventsTable reports whether md's last lines are a table under
// eventsHeader.
func endsWithEventsTable(md string) bool {
	lines := strings.Split(strings.TrimRight(md, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		switch {
		case lines[i] == eventsHeader:
			return true
		case !strings.HasPrefix(lines[i], "|"):
			return false
		}
	}
	return false
}

// benchPushFreeAddr returns a loopback address with a port free right now.
func benchPushFreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench-push: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitListening waits until addr accepts connections, the child exits or 30s pass.
func waitListening(ctx context.Context, addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("bench-push: push exited before listening")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench-push: push did not listen on %s within 30s", addr)
		}
	}
}
