package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Ceiling is redis-benchmark's throughput for reserve.lua alone: EVALSHA
// from 50 connections, every call a fresh reservation (random user and
// requestId) against a practically endless stock. No gateway can beat it on
// the same Redis; it is the figure the intake is measured against.
type Ceiling struct {
	Command   string  `json:"command,omitempty"`
	Requests  int     `json:"requests"`
	Clients   int     `json:"clients"`
	OpsPerSec float64 `json:"opsPerSec"`
	P50       float64 `json:"p50_ms"`
	P95       float64 `json:"p95_ms"`
	P99       float64 `json:"p99_ms"`
	Max       float64 `json:"max_ms"`
	// Reserved is the number of calls that really reserved (entries in the
	// ceiling's intake stream); it must be (almost) Requests.
	Reserved int64  `json:"reserved"`
	Skipped  string `json:"skipped,omitempty"`
	Error    string `json:"error,omitempty"`
}

func (c *Ceiling) line() string {
	switch {
	case c.Skipped != "":
		return "skipped: " + c.Skipped
	case c.Error != "":
		return "error: " + c.Error
	}
	return fmt.Sprintf("%s EVALSHA reserve/s, p50 %s p99 %s (%d calls, %d clients, %d reserved)",
		fmtNum(c.OpsPerSec), fmtMs(c.P50), fmtMs(c.P99), c.Requests, c.Clients, c.Reserved)
}

// runCeiling runs redis-benchmark against the reserve script on keys of its
// own ("stampede-bench:{ceiling-<run>}:…", which no Stampede role reads),
// deleted afterwards; the per-call keys expire after 60 s.
func runCeiling(ctx context.Context, env Env, p Params) *Ceiling {
	c := &Ceiling{Requests: p.CeilingRequests, Clients: p.CeilingClients}
	bin, err := exec.LookPath("redis-benchmark")
	switch {
	case err != nil:
		c.Skipped = "redis-benchmark is not on PATH"
		return c
	case env.ReserveScript == "":
		c.Skipped = "the reserve script's source was not found (run from the repository root or pass --reserve-script)"
		return c
	case env.RedisAddr == "" || strings.Contains(env.RedisAddr, ","):
		c.Skipped = "measured on a standalone Redis only"
		return c
	}
	host, port, err := net.SplitHostPort(env.RedisAddr)
	if err != nil {
		c.Error = err.Error()
		return c
	}
	sha, err := env.Redis.ScriptLoad(ctx, env.ReserveScript).Result()
	if err != nil {
		c.Error = fmt.Sprintf("SCRIPT LOAD: %v", err)
		return c
	}
	base := "stampede-bench:{ceiling-" + newRunID() + "}:"
	stock, intake, buyers := base+"stock", base+"intake", base+"buyers"
	now := time.Now()
	if err := env.Redis.HSet(ctx, stock, "available", int64(1e15), "total", int64(1e15), "price", 100,
		"limit", 0, "maxq", 1, "start", now.Add(-time.Minute).UnixMilli(), "end", now.Add(time.Hour).UnixMilli()).Err(); err != nil {
		c.Error = fmt.Sprintf("create stock: %v", err)
		return c
	}
	defer env.Redis.Del(context.WithoutCancel(ctx), stock, intake, buyers)
	args := []string{"-h", host, "-p", port, "--dbnum", strconv.Itoa(env.RedisDB), "-n", strconv.Itoa(c.Requests), "-c", strconv.Itoa(c.Clients),
		// -r must fit a C int; two random parts make the requestId's
		// space 10^18, so no two calls collide into a duplicate.
		"-r", "1000000000", "--csv",
		"EVALSHA", sha, "6", stock, base + "req:__rand_int__:__rand_int__", base + "user:__rand_int__", base + "order:__rand_int__", intake, buyers,
		"0000000000000000000000", "__rand_int__", "r__rand_int__", "1", "60"}
	c.Command = "redis-benchmark " + strings.Join(args, " ")
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(cctx, bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		c.Error = fmt.Sprintf("%v: %s", err, strings.TrimSpace(stderr.String()))
		return c
	}
	if err := c.parseCSV(out); err != nil {
		c.Error = err.Error()
		return c
	}
	if c.Reserved, err = env.Redis.XLen(ctx, intake).Result(); err != nil {
		c.Error = fmt.Sprintf("XLEN: %v", err)
		return c
	}
	if c.Reserved < int64(c.Requests)*99/100 {
		c.Error = fmt.Sprintf("only %d of %d calls reserved: the figure is not the reserve path's", c.Reserved, c.Requests)
	}
	return c
}

// parseCSV reads the last line of redis-benchmark --csv:
// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms".
// The test name may itself hold commas, so fields are taken from the right.
func (c *Ceiling) parseCSV(out []byte) error {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	f := strings.Split(last, ",")
	if len(f) < 8 {
		return fmt.Errorf("redis-benchmark: unexpected output %q", last)
	}
	num := make([]float64, 7)
	for i, s := range f[len(f)-7:] {
		v, err := strconv.ParseFloat(strings.Trim(s, `" `), 64)
		if err != nil {
			return fmt.Errorf("redis-benchmark: unexpected output %q", last)
		}
		num[i] = v
	}
	c.OpsPerSec, c.P50, c.P95, c.P99, c.Max = num[0], num[3], num[4], num[5], num[6]
	if c.OpsPerSec <= 0 {
		return errors.New("redis-benchmark: no throughput reported")
	}
	return nil
}
