package systest

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
	"github.com/stampede-sh/stampede/systest/ports"
)

// mariadbServer is a MariaDB server of one test's own (mariadb-install-db
// and mariadbd in a temporary directory, on a port of systest/ports): the
// test that kills MariaDB kills this one, never a server others use.
type mariadbServer struct {
	t    *testing.T
	bin  string
	dir  string
	port string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startMariaDB installs and starts a MariaDB server for t; it is killed when
// the test ends. The test is skipped where the MariaDB server binaries are
// missing.
func startMariaDB(t *testing.T) *mariadbServer {
	t.Helper()
	bin := lookBin("mariadbd", "/usr/sbin/mariadbd")
	install := lookBin("mariadb-install-db", "/usr/bin/mariadb-install-db")
	if bin == "" || install == "" {
		t.Skip("mariadbd and mariadb-install-db not installed: the kill test needs a MariaDB server of its own")
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ports.Addr(t))
	m := &mariadbServer{t: t, bin: bin, dir: t.TempDir(), port: port}
	out, err := exec.Command(install, "--no-defaults", "--auth-root-authentication-method=normal", "--user="+u.Username,
		"--datadir="+filepath.Join(m.dir, "data"), "--skip-test-db").CombinedOutput()
	if err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	m.start()
	t.Cleanup(m.kill)
	return m
}

// lookBin is name's path on PATH, else fallback if it exists, else "".
func lookBin(name, fallback string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if _, err := os.Stat(fallback); err == nil {
		return fallback
	}
	return ""
}

// dsn is the server's DSN without a database (root, no password).
func (m *mariadbServer) dsn() string { return "root@tcp(127.0.0.1:" + m.port + ")/" }

// start runs mariadbd on the server's directory and port and waits until it
// answers.
func (m *mariadbServer) start() {
	m.t.Helper()
	u, err := user.Current()
	if err != nil {
		m.t.Fatal(err)
	}
	cmd := exec.Command(m.bin, "--no-defaults", "--datadir="+filepath.Join(m.dir, "data"), "--port="+m.port,
		"--bind-address=127.0.0.1", "--socket="+filepath.Join(m.dir, "sock"), "--user="+u.Username, "--skip-log-bin",
		"--innodb-buffer-pool-size=256M", "--innodb-flush-log-at-trx-commit=2", "--max-connections=1000",
		"--log-error="+filepath.Join(m.dir, "err"))
	if err := cmd.Start(); err != nil {
		m.t.Fatalf("mariadbd: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	db, err := sql.Open("mysql", m.dsn())
	if err != nil {
		m.t.Fatal(err)
	}
	defer db.Close()
	pipelinetest.WaitFor(m.t, 60*time.Second, "the test's MariaDB answering", func() (bool, string) {
		err := db.Ping()
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(m.dir, "err"))
			return false, fmt.Sprintf("%v\n%s", err, tail(string(log), 5))
		}
		return true, ""
	})
}

// kill SIGKILLs the server and waits for its exit.
func (m *mariadbServer) kill() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		m.t.Errorf("mariadbd %d did not exit within 30 s of SIGKILL", cmd.Process.Pid)
	}
}

// MariaDB SIGKILLed while the writers store locked batches (the writer
// design, a sale running) and started again 3 s later: every accepted order
// ends WAITING_PAY (stock covers them all) exactly once, with one LOCK flow,
// MySQL stock locked once per order, and the docs/spec.md §5 audit passes. A batch
// whose commit the kill cut is rolled back by crash recovery and written
// again; one whose commit landed before the kill is found stored.
func TestMariaDBKilledMidBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("system test: starts a MariaDB server of its own")
	}
	my := startMariaDB(t)
	// Every database of this test on that server (persistencetest reads
	// the variable): no other test's server is touched.
	t.Setenv("STAMPEDE_TEST_MYSQL_DSN", my.dsn())
	e := newEnvFor(t, "mariadbkill")
	app := e.serve("app", allButPush)
	e.waitReady(30 * time.Second)
	const n = 3000
	pid := e.product(n)

	var accepted atomic.Int64
	var intents []*intent
	saleDone := make(chan struct{})
	go func() {
		defer close(saleDone)
		intents = e.sale(pid, n, 5_000_000, saleOptions{workers: 8, pace: 20 * time.Millisecond, accepted: &accepted})
	}()
	waitAccepted(t, &accepted, 800, 60*time.Second)
	stored := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ?`, pid)
	acceptedAtKill := accepted.Load()
	my.kill()
	killedAt := time.Now()
	time.Sleep(3 * time.Second)
	my.start()
	pipelinetest.WaitFor(t, 60*time.Second, "MariaDB answering the store again", func() (bool, string) {
		err := e.store.DB.PingContext(e.ctx)
		return err == nil, fmt.Sprint(err)
	})
	upAt := time.Now()
	<-saleDone
	t.Logf("MariaDB killed after %d accepted (%d stored just before), back %s later; %d accepted in all",
		acceptedAtKill, stored, upAt.Sub(killedAt).Round(time.Millisecond), accepted.Load())
	if acceptedAtKill >= n {
		t.Fatalf("the sale was over before the kill: no batch was in flight")
	}
	rep := e.settle(pid, upAt, 120*time.Second)
	got, other := count202(intents)
	if got != n {
		t.Errorf("%d × 202 of %d (other answers %v); the order path must not need MySQL", got, n, other)
	}
	e.checkIntents(pid, intents, rep)
	if c := e.count(`SELECT COUNT(*) FROM stock_flow f JOIN order_info o ON f.biz_no = o.order_no
		WHERE f.biz_type = 'LOCK' AND o.product_id = ?`, pid); c != got {
		t.Errorf("%d LOCK flows, want one per accepted order (%d)", c, got)
	}
	if c := e.count(`SELECT locked FROM stock WHERE product_id = ?`, pid); c != got {
		t.Errorf("MySQL stock locked %d, want %d", c, got)
	}
	// The writers met the dead server with a batch in hand and retried it.
	if !strings.Contains(app.stderr.String(), "writer: flush batch failed, retrying") {
		t.Errorf("no writer batch failed against the killed MariaDB: the kill did not hit a batch")
	}
	if c := e.count(`SELECT COUNT(*) FROM mq_outbox WHERE event_type = 'ORDER_CREATED'`); c != 0 {
		t.Errorf("%d ORDER_CREATED rows: the writer design writes none", c)
	}
}
