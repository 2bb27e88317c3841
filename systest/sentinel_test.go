package systest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/systest/ports"
)

// A Redis primary, one replica and three Sentinels on loopback, private to
// one test (issue 13): the processes get the Sentinels' addresses and the
// master name, and follow the failover themselves.

// sentinelMaster is the master name the test Sentinels monitor.
const sentinelMaster = "stampede"

type sentinelGroup struct {
	t         *testing.T
	primary   *redisServer // the redis-server started as primary (killed by the test)
	replica   *redisServer
	sentinels []*redisServer
}

// startSentinelGroup starts a primary (no persistence: appendonly no, save
// ""), a replica of it and three Sentinels (quorum 2, down-after 1s,
// failover-timeout 5s) and waits until every Sentinel knows the replica and
// the other Sentinels.
func startSentinelGroup(t *testing.T) *sentinelGroup {
	t.Helper()
	g := &sentinelGroup{t: t}
	g.primary = startPlainRedis(t, "")
	g.replica = startPlainRedis(t, g.primary.addr())
	// The replica's first sync must be over before the sale: with Redis 7's
	// repl-diskless-sync-delay (5 s) it can still be waiting for its RDB
	// when the test cuts it off, and then the Sentinels promote an empty
	// server (what made TestFailoverSentinelNone flaky).
	waitReplicas(t, g.primary.addr(), 1, 30*time.Second)
	for range 3 {
		_, port, _ := net.SplitHostPort(ports.Addr(t))
		s := &redisServer{t: t, port: port, dir: t.TempDir()}
		conf := filepath.Join(s.dir, "sentinel.conf")
		_, pport, _ := net.SplitHostPort(g.primary.addr())
		body := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %s 2\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\nsentinel parallel-syncs %s 1\n",
			port, s.dir, sentinelMaster, pport, sentinelMaster, sentinelMaster, sentinelMaster)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		s.args = []string{conf, "--sentinel", "--logfile", filepath.Join(s.dir, "sentinel.log")}
		s.start()
		t.Cleanup(func() {
			s.stop(syscall.SIGKILL)
			if t.Failed() {
				log, _ := os.ReadFile(filepath.Join(s.dir, "sentinel.log"))
				t.Logf("sentinel %s log:\n%s", s.addr(), tail(string(log), 3000))
			}
		})
		g.sentinels = append(g.sentinels, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range g.sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.addr()})
		for {
			reps, err1 := c.Replicas(ctx, sentinelMaster).Result()
			sens, err2 := c.Sentinels(ctx, sentinelMaster).Result()
			if err1 == nil && err2 == nil && len(reps) == 1 && len(sens) == 2 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("sentinel %s: replicas %v sentinels %v: %v %v", s.addr(), reps, sens, err1, err2)
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	}
	return g
}

// startPlainRedis starts a redis-server without persistence, a replica of
// primary if not empty.
func startPlainRedis(t *testing.T, primary string) *redisServer {
	t.Helper()
	_, port, _ := net.SplitHostPort(ports.Addr(t))
	r := &redisServer{t: t, port: port, dir: t.TempDir()}
	r.args = []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", r.dir,
		"--daemonize", "no", "--logfile", filepath.Join(r.dir, "redis.log"), "--maxmemory-policy", "noeviction"}
	if primary != "" {
		h, p, _ := net.SplitHostPort(primary)
		r.args = append(r.args, "--replicaof", h, p)
	}
	r.start()
	t.Cleanup(func() { r.stop(syscall.SIGKILL) })
	return r
}

// addrs is the Sentinels' address list the processes get.
func (g *sentinelGroup) addrs() string {
	var out []string
	for _, s := range g.sentinels {
		out = append(out, s.addr())
	}
	return strings.Join(out, ",")
}

// client is a failover client of the group, for the test's own checks.
func (g *sentinelGroup) client() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinelMaster,
		SentinelAddrs: strings.Split(g.addrs(), ","), DialTimeout: time.Second})
}

// waitPrimary waits until every Sentinel names the same primary other than
// old, that server says role:master and the Sentinels finished the failover
// (no failover in progress), and returns its address.
func (g *sentinelGroup) waitPrimary(old string, limit time.Duration) string {
	g.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		addr, ok := "", true
		for _, s := range g.sentinels {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.addr()})
			a, err := c.GetMasterAddrByName(ctx, sentinelMaster).Result()
			m, err2 := c.Master(ctx, sentinelMaster).Result()
			c.Close()
			if err != nil || err2 != nil || len(a) != 2 {
				ok, last = false, fmt.Sprint(err, err2)
				break
			}
			got := net.JoinHostPort(a[0], a[1])
			if got == old || (addr != "" && got != addr) || strings.Contains(m["flags"], "failover_in_progress") {
				ok, last = false, fmt.Sprintf("sentinel %s: %s flags %s", s.addr(), got, m["flags"])
				break
			}
			addr = got
		}
		if ok {
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			info, _ := c.Info(ctx, "replication").Result()
			c.Close()
			if strings.Contains(info, "role:master") {
				return addr
			}
			last = addr + " is not master yet"
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.t.Fatalf("no failover away from %s within %s: %s", old, limit, last)
	return ""
}

// waitReplicas waits until the server at addr reports n connected replicas
// in sync (state online).
func waitReplicas(t *testing.T, addr string, n int, limit time.Duration) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(limit)
	var info string
	for time.Now().Before(deadline) {
		info, _ = c.Info(context.Background(), "replication").Result()
		if strings.Count(info, "state=online") >= n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("redis %s: fewer than %d replicas online after %s:\n%s", addr, n, limit, info)
}

// startCmd is exec.Command for the server's program and args.
func (r *redisServer) command() *exec.Cmd {
	if r.args == nil {
		return exec.Command("redis-server", "--port", r.port, "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "yes", "--dir", r.dir, "--daemonize", "no", "--logfile", filepath.Join(r.dir, "redis.log"))
	}
	return exec.Command("redis-server", r.args...)
}

// cutReplica makes the replica fall behind: it is stopped (SIGSTOP) and the
// primary drops its replication link (CLIENT KILL TYPE replica), so what
// the primary answers from now on exists only there; resumeReplica
// (SIGCONT) lets it go on with what it had received. (A proxy in the link
// does not work: the Sentinels point the replica at the primary's own
// address again.)
func (g *sentinelGroup) cutReplica() {
	g.t.Helper()
	g.replica.signal(syscall.SIGSTOP)
	c := redis.NewClient(&redis.Options{Addr: g.primary.addr(), MaxRetries: -1})
	defer c.Close()
	if err := c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		g.t.Fatalf("client kill type replica: %v", err)
	}
}

func (g *sentinelGroup) resumeReplica() { g.replica.signal(syscall.SIGCONT) }

// signal sends sig to the running server without waiting (SIGSTOP, SIGCONT).
func (r *redisServer) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		r.cmd.Process.Signal(sig)
	}
}
