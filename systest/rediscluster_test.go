package systest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/systest/ports"
)

// A real 3-master Redis Cluster on loopback for the scale-out tests, on
// ports of its own (systest/ports: tests, and test runs, at once never share
// a node).

// clusterConfName is the cluster-config-file name of the node on port: it
// marks a node as started by this harness.
func clusterConfName(port int) string { return fmt.Sprintf("stampede-systest-node-%d.conf", port) }

// redisCluster is a running test cluster: one redis-server per port, all
// masters, every slot assigned.
type redisCluster struct {
	t     *testing.T
	dir   string
	nodes []*clusterNode
	// masters is the number of masters (shards); the other nodes are
	// their replicas (startRedisClusterWith).
	masters     int
	nodeTimeout int // cluster-node-timeout, ms
}

type clusterNode struct {
	c    *redisCluster
	port int
	bus  int // cluster bus port (cluster-port)
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	rdb  *redis.Client // direct to this node (no redirections followed)
	id   string        // CLUSTER MYID
}

func (n *clusterNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// startRedisCluster starts three redis-server 7 in cluster mode, each on a
// client port and a cluster bus port of its own (systest/ports; config
// file, logs and dumps in t.TempDir(), no persistence), joins them with
// `redis-cli --cluster create … --cluster-replicas 0` and waits until every
// node reports cluster_state:ok and knows the whole slot map. The nodes are
// killed and their files removed when the test ends.
func startRedisCluster(t *testing.T) *redisCluster {
	return startRedisClusterWith(t, 3, 0, 5000)
}

// startRedisClusterWith is startRedisCluster with nodes nodes, replicas
// replicas per master (redis-cli assigns them: nodes/(replicas+1) masters)
// and cluster-node-timeout nodeTimeout ms (also how long a dead master takes
// to be failed over).
func startRedisClusterWith(t *testing.T, nodes, replicas, nodeTimeout int) *redisCluster {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("redis cluster test needs %s on PATH: %v", bin, err)
		}
	}
	free, err := ports.Free(2 * nodes)
	if err != nil {
		t.Fatal(err)
	}
	c := &redisCluster{t: t, dir: t.TempDir(), masters: nodes / (replicas + 1), nodeTimeout: nodeTimeout}
	t.Cleanup(c.stop)
	for i := range nodes {
		c.nodes = append(c.nodes, c.startNode(free[2*i], free[2*i+1]))
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.waitOK(ctx)
	if replicas > 0 {
		// Every replica's first sync is over before the test's sale (see
		// startSentinelGroup): a master killed before it would be replaced
		// by an empty replica.
		for _, n := range c.nodes {
			if info, _ := n.rdb.Info(ctx, "replication").Result(); strings.Contains(info, "role:master") {
				waitReplicas(t, n.addr(), replicas, 30*time.Second)
			}
		}
	}
	return c
}

func (c *redisCluster) startNode(port, bus int) *clusterNode {
	c.t.Helper()
	n := &clusterNode{c: c, port: port, bus: bus, dir: filepath.Join(c.dir, strconv.Itoa(port))}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	n.start()
	return n
}

// start runs the node's redis-server (again, after a kill: it rejoins with
// its cluster config file and no data) and waits until it answers.
func (n *clusterNode) start() {
	c := n.c
	c.t.Helper()
	port := n.port
	n.done = make(chan struct{})
	n.cmd = exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(n.bus), "--cluster-config-file", filepath.Join(n.dir, clusterConfName(port)),
		"--cluster-node-timeout", strconv.Itoa(c.nodeTimeout), "--save", "", "--appendonly", "no", "--dir", n.dir,
		"--daemonize", "no", "--logfile", filepath.Join(n.dir, "redis.log"))
	if err := n.cmd.Start(); err != nil {
		c.t.Fatalf("redis-server on %d: %v", port, err)
	}
	cmd, done := n.cmd, n.done
	go func() { cmd.Wait(); close(done) }()
	if n.rdb == nil {
		n.rdb = redis.NewClient(&redis.Options{Addr: n.addr(), DialTimeout: time.Second, MaxRetries: -1})
	}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		id, err := n.rdb.ClusterMyID(ctx).Result()
		if err == nil {
			n.id = id
			return
		}
		select {
		case <-n.done:
			log, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			c.t.Fatalf("redis-server on %d exited: %v\n%s", port, err, log)
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redis-server on %d not answering: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitOK waits until every node says cluster_state:ok and maps all 16384
// slots to the masters.
func (c *redisCluster) waitOK(ctx context.Context) {
	c.t.Helper()
	var last string
	for ctx.Err() == nil {
		ok := true
		for _, n := range c.nodes {
			info, err := n.rdb.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				ok, last = false, fmt.Sprintf("%s: %v %s", n.addr(), err, firstLine(info))
				break
			}
			shards, err := n.rdb.ClusterShards(ctx).Result()
			covered := int64(0)
			for _, s := range shards {
				for _, r := range s.Slots {
					covered += r.End - r.Start + 1
				}
			}
			if err != nil || len(shards) != c.masters || covered != 16384 {
				ok, last = false, fmt.Sprintf("%s: %d shards, %d slots, %v", n.addr(), len(shards), covered, err)
				break
			}
		}
		if ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("redis cluster not ok: %s", last)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(l)
}

// seeds is the comma-separated address list the processes get.
func (c *redisCluster) seeds() string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr()
	}
	return strings.Join(addrs, ",")
}

// node returns the node with the given id or address.
func (c *redisCluster) node(idOrAddr string) *clusterNode {
	for _, n := range c.nodes {
		if n.id == idOrAddr || n.addr() == idOrAddr {
			return n
		}
	}
	return nil
}

// owner returns the master that owns slot, as the first node sees it.
func (c *redisCluster) owner(ctx context.Context, slot int64) (*clusterNode, error) {
	shards, err := c.nodes[0].rdb.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	for _, s := range shards {
		for _, r := range s.Slots {
			if slot < r.Start || slot > r.End {
				continue
			}
			for _, n := range s.Nodes {
				if n.Role == "master" {
					if cn := c.node(n.ID); cn != nil {
						return cn, nil
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("slot %d has no known master", slot)
}

// keySlot is CLUSTER KEYSLOT key, asked of the first node.
func (c *redisCluster) keySlot(ctx context.Context, key string) (int64, error) {
	return c.nodes[0].rdb.ClusterKeySlot(ctx, key).Result()
}

// migrateSlot moves slot from its master to dst by the resharding protocol
// redis-cli uses: SETSLOT IMPORTING on dst, SETSLOT MIGRATING on the source,
// MIGRATE … KEYS in batches of batch keys from CLUSTER GETKEYSINSLOT until the
// slot is empty on the source, then SETSLOT NODE dst on dst, the source and
// every other master. pause, if positive, is slept between batches (a slower
// migration leaves the slot half moved for longer). It returns the number of
// keys moved.
func (c *redisCluster) migrateSlot(ctx context.Context, slot int64, dst *clusterNode, batch int, pause time.Duration) (int, error) {
	src, err := c.owner(ctx, slot)
	if err != nil {
		return 0, err
	}
	if src == dst {
		return 0, fmt.Errorf("slot %d is already on %s", slot, dst.addr())
	}
	if err := dst.rdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err(); err != nil {
		return 0, fmt.Errorf("setslot importing on %s: %w", dst.addr(), err)
	}
	if err := src.rdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err(); err != nil {
		return 0, fmt.Errorf("setslot migrating on %s: %w", src.addr(), err)
	}
	moved := 0
	for {
		keys, err := src.rdb.ClusterGetKeysInSlot(ctx, int(slot), batch).Result()
		if err != nil {
			return moved, fmt.Errorf("getkeysinslot on %s: %w", src.addr(), err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.rdb.Do(ctx, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
			return moved, fmt.Errorf("migrate %d keys to %s: %w", len(keys), dst.addr(), err)
		}
		moved += len(keys)
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	// The destination first, so that it never redirects back (redis-cli's order).
	order := []*clusterNode{dst, src}
	for _, n := range c.nodes {
		if n != dst && n != src {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := n.rdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err(); err != nil {
			return moved, fmt.Errorf("setslot node on %s: %w", n.addr(), err)
		}
	}
	return moved, nil
}

// stop kills every node; t.TempDir removes their files.
func (c *redisCluster) stop() {
	for _, n := range c.nodes {
		if n.rdb != nil {
			n.rdb.Close()
		}
		select {
		case <-n.done:
			continue
		default:
		}
		n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.done
	}
}

// clusterDB labels the MySQL database (and RabbitMQ vhost) of the cluster
// tests.
const clusterDB = "cluster"

// newClusterEnv is newEnv against a fresh 3-master Redis Cluster: redisAddr
// is the three seed addresses (the processes make a cluster client from
// them), rdb a *redis.ClusterClient, redis nil (the fault helpers that stop
// or restart the private redis-server cannot be used). MySQL database and
// RabbitMQ vhost are the test's own of label "cluster".
func newClusterEnv(t *testing.T) (*env, *redisCluster) {
	t.Helper()
	e := baseEnv(t, clusterDB)
	cl := startRedisCluster(t)
	e.redisAddr = cl.seeds()
	e.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cl.seeds(), ","), DialTimeout: time.Second,
		MaxRedirects: 16})
	t.Cleanup(func() { e.rdb.Close() })
	return e, cl
}
