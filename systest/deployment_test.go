package systest

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/systest/ports"
)

// TestClusterDeploymentIdentity: on a 3-master Redis Cluster every master
// carries the deployment identity (one key per master, in a slot it serves)
// once a role started; a master that carries another deployment's identity
// makes the next process refuse to start, naming both.
func TestClusterDeploymentIdentity(t *testing.T) {
	t.Parallel()
	e, cl := newClusterEnv(t)
	app := e.serve("app", "gateway")
	e.waitReady(60 * time.Second)
	ctx := context.Background()
	ours, err := e.store.DeploymentID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	masters := 0
	var foreign *clusterNode
	var foreignKey string
	for _, n := range cl.nodes {
		if info, _ := n.rdb.Info(ctx, "replication").Result(); !strings.Contains(info, "role:master") {
			continue
		}
		masters++
		keys, err := n.rdb.Keys(ctx, lua.DeploymentKey+":*").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("master %s holds identity keys %v (%v), want one", n.addr(), keys, err)
		}
		if v, _ := n.rdb.Get(ctx, keys[0]).Result(); v != ours {
			t.Fatalf("master %s: %s = %q, want %s", n.addr(), keys[0], v, ours)
		}
		foreign, foreignKey = n, keys[0]
	}
	if masters != 3 {
		t.Fatalf("%d masters", masters)
	}
	app.kill()
	// One master now says it belongs to another deployment.
	const theirs = "00000000-0000-4000-8000-000000000000"
	if err := foreign.rdb.Set(ctx, foreignKey, theirs, 0).Err(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e.bin, "serve", "--mode", "development", "--roles", "writer", "--mysql-dsn", e.mysqlDSN,
		"--redis-addr", e.redisAddr, "--amqp-url", e.amqpURL, "--http-addr", ports.Addr(t), "--push-addr", ports.Addr(t))
	out, err := runFor(cmd, 60*time.Second)
	if err == nil || !strings.Contains(out, theirs) || !strings.Contains(out, ours) || !strings.Contains(out, "redis-takeover") {
		t.Fatalf("start against a master of another deployment: %v\n%s", err, tail(out, 3000))
	}
	t.Logf("refused: %s", tail(strings.TrimSpace(out), 600))
}

// runFor runs cmd, killing it after limit, and returns its combined output.
func runFor(cmd *exec.Cmd, limit time.Duration) (string, error) {
	var buf lockedBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return buf.String(), err
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		return buf.String(), context.DeadlineExceeded
	}
}
