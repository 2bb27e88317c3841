package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/stampede-sh/stampede/app"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/bench"
	"github.com/stampede-sh/stampede/gateway"
)

// The Redis durability comparison of `stampede bench --durability-levels`
// (issue 13): one in-process gateway per level, all on one private Redis
// primary with one replica that the bench starts on loopback and removes at
// the end. The primary's appendonly is switched per level (CONFIG SET) just
// before that level's scenarios: yes (appendfsync everysec) for aof, no for
// none and replicated. The replica stays attached for every level.

// parseLevels reads "none,aof,replicated": known levels, each once, at
// least one. Errors wrap app.ErrUsage.
func parseLevels(s string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		d, err := gateway.ParseDurability(part)
		if err != nil {
			return nil, fmt.Errorf("%w: --durability-levels: %v", app.ErrUsage, err)
		}
		if slices.Contains(out, string(d)) {
			return nil, fmt.Errorf("%w: --durability-levels lists %s twice", app.ErrUsage, d)
		}
		out = append(out, string(d))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: --durability-levels lists no level", app.ErrUsage)
	}
	return out, nil
}

// levelScenarios are the scenarios a level comparison runs (default: the
// first).
var levelScenarios = []string{bench.Sustained, bench.SoldOut}

// checkLevelFlags refuses the flags a level comparison cannot combine with.
func (f *benchFlags) checkLevelFlags(scenarios []string) error {
	switch {
	case f.url != "" || f.baselineURL != "":
		return fmt.Errorf("%w: --durability-levels starts its own gateways and Redis: no --url or --baseline-url", app.ErrUsage)
	case f.baselineDurability != "":
		return fmt.Errorf("%w: --durability-levels replaces --baseline-durability", app.ErrUsage)
	}
	for _, s := range scenarios {
		if !slices.Contains(levelScenarios, s) {
			return fmt.Errorf("%w: --durability-levels runs only the scenarios %s, not %s", app.ErrUsage, strings.Join(levelScenarios, ","), s)
		}
	}
	return nil
}

// benchRedis is the private Redis of a level comparison: a primary and one
// replica of it, redis-server processes on loopback with their files in dir.
type benchRedis struct {
	primary, replica string // host:port
	dir              string
	procs            []*exec.Cmd
	client           *redis.Client // to the primary, for CONFIG SET
}

// startBenchRedis starts the primary (appendonly yes, appendfsync everysec,
// no RDB snapshots) and a replica of it (appendonly no), and waits until the
// replica's link is up. It needs redis-server on PATH.
func startBenchRedis(ctx context.Context) (*benchRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("--durability-levels needs redis-server on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "stampede-bench-redis-")
	if err != nil {
		return nil, err
	}
	b := &benchRedis{dir: dir}
	start := func(name string, extra ...string) (string, error) {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return "", err
		}
		_, port, _ := net.SplitHostPort(addr)
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
		args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--dir", d,
			"--logfile", filepath.Join(d, "redis.log"), "--daemonize", "no"}, extra...)
		cmd := exec.Command(bin, args...)
		if err := cmd.Start(); err != nil {
			return "", fmt.Errorf("start redis-server (%s): %w", name, err)
		}
		b.procs = append(b.procs, cmd)
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		for deadline := time.Now().Add(10 * time.Second); ; {
			if err := c.Ping(ctx).Err(); err == nil {
				return addr, nil
			} else if time.Now().After(deadline) || ctx.Err() != nil {
				return "", fmt.Errorf("redis-server (%s) at %s did not answer: %w", name, addr, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	fail := func(err error) (*benchRedis, error) {
		b.stop()
		return nil, fmt.Errorf("bench: private redis: %w", err)
	}
	if b.primary, err = start("primary", "--appendonly", "yes", "--appendfsync", "everysec"); err != nil {
		return fail(err)
	}
	host, port, _ := net.SplitHostPort(b.primary)
	if b.replica, err = start("replica", "--appendonly", "no", "--replicaof", host, port); err != nil {
		return fail(err)
	}
	b.client = redis.NewClient(&redis.Options{Addr: b.primary})
	rc := redis.NewClient(&redis.Options{Addr: b.replica})
	defer rc.Close()
	for deadline := time.Now().Add(15 * time.Second); ; {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fail(fmt.Errorf("replica %s did not sync with %s (%v)", b.replica, b.primary, err))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return b, nil
}

// setLevel configures the primary for level: appendonly yes for aof (and
// waits until the AOF rewrite that CONFIG SET starts has ended, so the level
// is measured in the steady state of a server started with appendonly yes),
// appendonly no otherwise.
func (b *benchRedis) setLevel(ctx context.Context, level string) error {
	on := level == string(gateway.DurabilityAOF)
	if err := b.client.ConfigSet(ctx, "appendonly", map[bool]string{true: "yes", false: "no"}[on]).Err(); err != nil {
		return fmt.Errorf("config set appendonly: %w", err)
	}
	if !on {
		return nil
	}
	for deadline := time.Now().Add(time.Minute); ; {
		info, err := b.client.Info(ctx, "persistence").Result()
		if err != nil {
			return err
		}
		if infoField(info, "aof_enabled") == "1" && infoField(info, "aof_rewrite_in_progress") == "0" && infoField(info, "aof_rewrite_scheduled") == "0" {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the AOF rewrite after CONFIG SET appendonly yes did not end within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// describe is the primary's appendonly and appendfsync and its connected
// replicas, for the log.
func (b *benchRedis) describe(ctx context.Context) string {
	cfg, err := b.client.ConfigGet(ctx, "append*").Result()
	if err != nil {
		return err.Error()
	}
	info, err := b.client.Info(ctx, "replication").Result()
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("appendonly %s, appendfsync %s, %s replica(s)", cfg["appendonly"], cfg["appendfsync"], infoField(info, "connected_slaves"))
}

// stop kills both servers and removes their files.
func (b *benchRedis) stop() {
	if b.client != nil {
		b.client.Close()
	}
	for i := len(b.procs) - 1; i >= 0; i-- {
		_ = b.procs[i].Process.Kill()
		_ = b.procs[i].Wait()
	}
	_ = os.RemoveAll(b.dir)
}

// infoField is the value of name in an INFO answer ("" if missing).
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// freeLoopbackAddr is a 127.0.0.1 port free at the time of the call.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// levelAddr is the listen address of the i-th extra level gateway (i ≥ 1):
// base's port + i - 1.
func levelAddr(base string, i int) (string, error) {
	host, port, err := net.SplitHostPort(base)
	if err != nil {
		return "", fmt.Errorf("%w: --baseline-addr %q: %v", app.ErrUsage, base, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p+i-1 > 65535 {
		return "", fmt.Errorf("%w: --baseline-addr %q: bad port", app.ErrUsage, base)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+i-1)), nil
}
