package systest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/systest/ports"
)

// A private 3-node RabbitMQ cluster on loopback (issue 13), started once per
// test binary (it takes a minute on two cores) and stopped after every test
// ran. Its nodes are stampede-t1-PID@localhost … t3 (PID: the test binary, so a node left
// behind by a killed run never takes the name of a new one), their own ports, Mnesia and
// log directories, management and Prometheus off; the shared node is never
// touched (only its Erlang cookie is copied, so rabbitmqctl reaches them).

type rabbitNode struct {
	name string // stampede-tN@localhost
	port int    // AMQP
	dist int    // Erlang distribution
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	pid  int // the Erlang VM's OS pid
}

type rabbitCluster struct {
	home  string // HOME of the nodes and of rabbitmqctl: the cookie
	nodes []*rabbitNode
}

var (
	rabbitOnce    sync.Once
	rabbitShared  *rabbitCluster
	rabbitErr     error
	afterAllTests []func() // run by TestMain after every test
)

// sharedRabbitCluster returns the binary's cluster, starting it on first
// use. A test that kills a node must be the only one to use it (it is: one
// test does).
func sharedRabbitCluster(t *testing.T) *rabbitCluster {
	t.Helper()
	if _, err := exec.LookPath("rabbitmq-server"); err != nil {
		t.Skip("rabbitmq-server not installed: the RabbitMQ cluster test needs it")
	}
	rabbitOnce.Do(func() {
		c, err := startRabbitCluster()
		rabbitShared, rabbitErr = c, err
		if c != nil {
			afterAllTests = append(afterAllTests, c.stop)
		}
	})
	if rabbitErr != nil {
		t.Fatalf("rabbitmq cluster: %v", rabbitErr)
	}
	return rabbitShared
}

func rabbitServerBin() string {
	if _, err := os.Stat("/usr/lib/rabbitmq/bin/rabbitmq-server"); err == nil {
		return "/usr/lib/rabbitmq/bin/rabbitmq-server" // not the wrapper, which switches user
	}
	return "rabbitmq-server"
}

func rabbitctlBin() string {
	if _, err := os.Stat("/usr/lib/rabbitmq/bin/rabbitmqctl"); err == nil {
		return "/usr/lib/rabbitmq/bin/rabbitmqctl"
	}
	return "rabbitmqctl"
}

func startRabbitCluster() (*rabbitCluster, error) { return startRabbitNodes("t", 3) }

// startRabbitNodes starts n private nodes named stampede-<prefix><i>-PID
// and, with n > 1, joins them into one cluster.
func startRabbitNodes(prefix string, count int) (*rabbitCluster, error) {
	home, err := os.MkdirTemp("", "stampede-rabbit-")
	if err != nil {
		return nil, err
	}
	c := &rabbitCluster{home: home}
	cookie, err := os.ReadFile("/var/lib/rabbitmq/.erlang.cookie")
	if err != nil {
		cookie, err = os.ReadFile(filepath.Join(os.Getenv("HOME"), ".erlang.cookie"))
	}
	if err != nil {
		return nil, fmt.Errorf("erlang cookie: %w", err)
	}
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), cookie, 0o400); err != nil {
		return nil, err
	}
	// Both ports of every node are free ports of their own (not AMQP port
	// + 10000: a distribution port past 65535 makes the node exit before it
	// logs anything).
	ports, err := ports.Free(2 * count)
	if err != nil {
		return nil, err
	}
	for i := 1; i <= count; i++ {
		n := &rabbitNode{name: fmt.Sprintf("stampede-%s%d-%d@localhost", prefix, i, os.Getpid()), port: ports[2*i-2], dist: ports[2*i-1],
			dir: filepath.Join(home, strconv.Itoa(i))}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return nil, err
		}
		os.WriteFile(filepath.Join(n.dir, "enabled_plugins"), []byte("[].\n"), 0o644)
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := c.startNode(n); err != nil {
			c.stop()
			return nil, err
		}
	}
	for _, n := range c.nodes {
		if out, err := c.awaitStartup(n, 3*time.Minute); err != nil {
			c.stop()
			return nil, fmt.Errorf("%s did not start: %v %s\n%s", n.name, err, out, n.logTail())
		}
		out, err := c.ctl(time.Minute, n, "eval", "list_to_integer(os:getpid()).")
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("%s pid: %v %s", n.name, err, out)
		}
		n.pid, _ = strconv.Atoi(strings.TrimSpace(out))
	}
	for _, n := range c.nodes[1:] {
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", c.nodes[0].name}, {"start_app"}} {
			// join_cluster sometimes fails at once with cannot_start_mnesia
			// on a loaded machine; a second try joins.
			var out string
			var err error
			for try := 0; try < 3; try++ {
				if out, err = c.ctl(2*time.Minute, n, args...); err == nil {
					break
				}
				time.Sleep(2 * time.Second)
			}
			if err != nil {
				c.stop()
				return nil, fmt.Errorf("%s %v: %v %s", n.name, args, err, out)
			}
		}
	}
	return c, nil
}

func (c *rabbitCluster) startNode(n *rabbitNode) error {
	n.cmd = exec.Command(rabbitServerBin())
	n.cmd.Env = append(os.Environ(),
		"HOME="+c.home,
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(n.dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.dir, "pid"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq"), // none: defaults
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.dir, "advanced.config"),
	)
	n.cmd.Stdout, n.cmd.Stderr = nil, nil
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	n.done = make(chan struct{})
	cmd, done := n.cmd, n.done
	go func() { cmd.Wait(); close(done) }()
	return nil
}

// awaitStartup waits until node n's broker has booted. rabbitmqctl
// await_startup fails at once (exit 69) while the VM has not yet registered
// with epmd, so it is retried until limit.
func (c *rabbitCluster) awaitStartup(n *rabbitNode, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		out, err := c.ctl(time.Until(deadline), n, "await_startup")
		if err == nil || time.Now().After(deadline) {
			return out, err
		}
		select {
		case <-n.done:
			return out, fmt.Errorf("the node exited: %w", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ctl runs rabbitmqctl -n node args.
func (c *rabbitCluster) ctl(limit time.Duration, n *rabbitNode, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, rabbitctlBin(), append([]string{"-n", n.name}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+c.home)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (n *rabbitNode) logTail() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "log", n.name+".log"))
	return tail(string(b), 2000)
}

// url is the AMQP URL of node n on vhost /.
func (n *rabbitNode) url() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.port) }

// urls is the node list the processes get.
func (c *rabbitCluster) urls() string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.url())
	}
	return strings.Join(out, ",")
}

// node returns the node named name.
func (c *rabbitCluster) node(name string) *rabbitNode {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// kill9 kills node n's Erlang VM with SIGKILL and waits for its exit.
func (c *rabbitCluster) kill9(n *rabbitNode) {
	if n.pid > 0 {
		syscall.Kill(n.pid, syscall.SIGKILL)
	}
	if n.cmd != nil && n.cmd.Process != nil {
		syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL) // the process group: the script and the VM
	}
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
	}
}

func (c *rabbitCluster) stop() {
	for _, n := range c.nodes {
		if n.done == nil {
			continue
		}
		select {
		case <-n.done:
			continue
		default:
		}
		c.kill9(n)
	}
	os.RemoveAll(c.home)
}
