package systest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// The MariaDB server the tests use, for the test that kills it: the file
// holding its pid and the shell command that starts it again (both unset:
// the test is skipped; it must never be a server others share).
const (
	mysqlPidFileEnv = "STAMPEDE_TEST_MYSQL_PIDFILE"
	mysqlRestartEnv = "STAMPEDE_TEST_MYSQL_RESTART"
)

// killMySQL SIGKILLs the test MariaDB server and returns a function that
// starts it again and waits until it answers.
func (e *env) killMySQL() (restart func()) {
	e.t.Helper()
	pidFile, restartCmd := os.Getenv(mysqlPidFileEnv), os.Getenv(mysqlRestartEnv)
	if pidFile == "" || restartCmd == "" {
		e.t.Skipf("set %s and %s to a private MariaDB server to kill", mysqlPidFileEnv, mysqlRestartEnv)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		e.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		e.t.Fatalf("pid file %s: %v", pidFile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		e.t.Fatalf("kill mariadbd %d: %v", pid, err)
	}
	pipelinetest.WaitFor(e.t, 10*time.Second, "mariadbd gone", func() (bool, string) {
		return syscall.Kill(pid, 0) != nil, fmt.Sprint(pid)
	})
	return func() {
		e.t.Helper()
		if out, err := exec.Command("sh", "-c", restartCmd).CombinedOutput(); err != nil {
			e.t.Fatalf("restart MariaDB (%s): %v\n%s", restartCmd, err, out)
		}
		pipelinetest.WaitFor(e.t, 60*time.Second, "MariaDB answering again", func() (bool, string) {
			err := e.store.DB.PingContext(e.ctx)
			return err == nil, fmt.Sprint(err)
		})
	}
}

// MariaDB SIGKILLed while the writers store locked batches (the writer
// design, a sale running) and started again 3 s later: every accepted order
// ends WAITING_PAY (stock covers them all) exactly once, with one LOCK flow,
// MySQL stock locked once per order, and the SPEC §5 audit passes. A batch
// whose commit the kill cut is rolled back by crash recovery and written
// again; one whose commit landed before the kill is found stored.
func TestMariaDBKilledMidBatch(t *testing.T) {
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
	restart := e.killMySQL()
	killedAt := time.Now()
	time.Sleep(3 * time.Second)
	restart()
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
