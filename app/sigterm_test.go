package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/lua/luatest"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
	"github.com/stampede-sh/stampede/systest/ports"
)

// buildBinary builds this command into a temporary directory, without
// -race: it is the system under test, run as a real process.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stampede")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/stampede").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// lockedBuffer collects a child process's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is a running `stampede serve`.
type proc struct {
	cmd     *exec.Cmd
	stderr  *lockedBuffer
	exited  chan struct{} // closed when the process has exited
	waitErr error         // its exit error, once exited is closed
}

func startServe(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, append([]string{"serve"}, args...)...), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("stampede serve (pid %d) stderr:\n%s", p.cmd.Process.Pid, tail(p.stderr.String(), 8000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// stop sends SIGTERM and waits for the exit, at most limit; it returns the
// time the exit took and the exit error.
func (p *proc) stop(t *testing.T, limit time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		return time.Since(start), p.waitErr
	case <-time.After(limit):
		t.Fatalf("stampede serve still running %s after SIGTERM", limit)
		return 0, nil
	}
}

// intent is one buyer's purchase request and what the sale answered.
type intent struct {
	user      int64
	token     string
	requestID string
	status    int    // 0: the request errored (connection refused or cut)
	orderNo   string // of a 202
	err       error
}

// TestSigtermDrainsAndRestartLosesNothing starts the real binary, sells from
// several goroutines, sends SIGTERM in the middle of the sale and checks the
// process drains and exits 0 within its bound; then it restarts the binary,
// waits for an idle pipeline and checks that nothing was lost or doubled:
// every 202 is exactly one WAITING_PAY order and its replay answers the same
// orderNo; an order without a 202 exists only for a request that errored
// during the shutdown, and its replay answers that orderNo; the
// reconciliation is clean.
func TestSigtermDrainsAndRestartLosesNothing(t *testing.T) {
	t.Parallel() // the test's own databases, vhost and ports
	if testing.Short() {
		t.Skip("end-to-end, builds and runs the binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	store := persistencetest.New(t, "sigterm")
	rdb := luatest.New(t, redisDBSigterm)
	amqpURL := pipelinetest.Vhost(t, "sigterm")
	bin := buildBinary(t)

	const (
		secret          = "sigterm-test-jwt-secret"
		shutdownTimeout = 10 * time.Second
	)
	httpAddr := ports.Addr(t)
	base := "http://" + httpAddr
	args := func(node int) []string {
		return []string{"--migrate",
			"--mysql-dsn", persistencetest.DSNFor(t, "sigterm") + "?parseTime=true",
			"--redis-addr", luatest.Addr(), "--redis-db", fmt.Sprint(rdb.Options().DB),
			"--amqp-url", amqpURL, "--http-addr", httpAddr, "--push-addr", ports.Addr(t),
			"--jwt-secret", secret, "--shutdown-timeout", shutdownTimeout.String(),
			"--node-id", fmt.Sprint(node), "--log-level", "warn",
			// Batches that wait to fill: SIGTERM finds a writer holding one.
			"--writer-batch", "100", "--writer-wait", "150ms",
		}
	}

	first := startServe(t, bin, args(1)...)
	if err := waitReady(ctx, base, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	d := &demo{base: base, secret: []byte(secret), client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	}}
	defer d.client.CloseIdleConnections()
	admin, _ := auth.Issue(d.secret, 1, true, time.Hour)
	now := time.Now().UTC()
	r, err := d.call(ctx, "POST", "/api/admin/products", admin, map[string]any{
		"name": "sigterm phone", "price": 2500, "stock": 100000, "perUserLimit": 1, "shards": 1,
		"saleStart": now.Add(-time.Second).Format(time.RFC3339), "saleEnd": now.Add(time.Hour).Format(time.RFC3339),
	})
	if err != nil || r.status != http.StatusCreated {
		t.Fatalf("create product: %d %v %v", r.status, r.body, err)
	}
	pid, _ := r.body["id"].(json.Number).Int64()
	intake := fmt.Sprintf("stampede:{p:%d:0}:intake", pid)
	pipelinetest.WaitFor(t, 30*time.Second, "writers reading the new product's intake stream", func() (bool, string) {
		groups, err := rdb.XInfoGroups(ctx, intake).Result()
		return err == nil && len(groups) > 0, fmt.Sprint(groups, err)
	})

	// The sale: 8 buyers' goroutines, each sending one intent per fresh
	// user back to back, until its first request errors (the gateway is
	// gone). SIGTERM goes out once 300 orders were accepted and the
	// pipeline is at work: 100 of them stored by the writer and 50 locked.
	const workers, sigtermAfter = 8, 300
	var accepted atomic.Int64
	var mu sync.Mutex
	var intents []*intent
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				uid := int64(100000 + w*100000 + i)
				tok, _ := auth.Issue(d.secret, uid, false, time.Hour)
				in := &intent{user: uid, token: tok, requestID: fmt.Sprintf("sig-%d", uid)}
				res, err := d.call(ctx, "POST", "/api/orders", tok, map[string]any{"productId": pid, "quantity": 1, "requestId": in.requestID})
				mu.Lock()
				intents = append(intents, in)
				mu.Unlock()
				if err != nil {
					in.err = err
					return
				}
				in.status = res.status
				if res.status == http.StatusAccepted {
					in.orderNo, _ = res.body["orderNo"].(string)
					accepted.Add(1)
				} else if res.status != http.StatusOK && res.status != http.StatusConflict {
					// A 503 (e.g. cut by the shutdown) may or may not have
					// reserved: treat it like an error.
					in.err = fmt.Errorf("answer %d %v", res.status, res.body)
					in.status = 0
				}
			}
		})
	}
	pipelinetest.WaitFor(t, 60*time.Second, "orders accepted and flowing before SIGTERM", func() (bool, string) {
		var stored, locked int
		store.DB.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(status = 'WAITING_PAY'), 0) FROM order_info WHERE product_id = ?`, pid).Scan(&stored, &locked)
		return accepted.Load() >= sigtermAfter && stored >= 100 && locked >= 50,
			fmt.Sprintf("accepted %d, stored %d, locked %d", accepted.Load(), stored, locked)
	})
	took, err := first.stop(t, shutdownTimeout+5*time.Second)
	if err != nil {
		t.Errorf("first process exit: %v (want exit code 0)", err)
	}
	if took > shutdownTimeout+2*time.Second {
		t.Errorf("first process took %s to exit after SIGTERM, bound %s", took, shutdownTimeout)
	}
	t.Logf("SIGTERM after %d accepted orders; exited in %s", accepted.Load(), took.Round(time.Millisecond))
	wg.Wait()

	// What the drain left: no intake entry delivered to a writer and not
	// acknowledged (writers wrote their batch), no outbox row SENDING (the
	// relay finished its batch).
	if pending, err := rdb.XPending(ctx, intake, "writers").Result(); err != nil || pending.Count != 0 {
		t.Errorf("after SIGTERM, intake entries pending (delivered, unacknowledged): %+v %v", pending, err)
	}
	var sending int
	if err := store.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM mq_outbox WHERE status = 'SENDING'`).Scan(&sending); err != nil || sending != 0 {
		t.Errorf("after SIGTERM, %d outbox rows SENDING (%v)", sending, err)
	}
	var stored int
	store.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_info WHERE product_id = ?`, pid).Scan(&stored)
	waiting, _ := rdb.XLen(ctx, intake).Result()
	t.Logf("after SIGTERM: %d orders stored, %d reservations wait in the intake stream", stored, waiting)

	byRequest := map[string]*intent{}
	var got202, errored int
	for _, in := range intents {
		byRequest[fmt.Sprintf("%d/%s", in.user, in.requestID)] = in
		switch {
		case in.status == http.StatusAccepted:
			got202++
		case in.status == 0:
			errored++
		default:
			t.Errorf("user %d: answer %d during the sale", in.user, in.status)
		}
	}
	t.Logf("sale: %d intents, %d × 202, %d errored by the shutdown", len(intents), got202, errored)
	for _, l := range strings.Split(first.stderr.String(), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) {
			t.Errorf("first process logged an error: %s", l)
		}
	}

	// Restart and let the pipeline settle.
	second := startServe(t, bin, args(2)...)
	if err := waitReady(ctx, base, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	rep, err := pipeline.WaitIdle(wctx, rdb, store, []int64{pid}, 200*time.Millisecond)
	wcancel()
	if err != nil {
		t.Fatalf("pipeline not idle after restart: %v", err)
	}

	// Orders as MySQL has them.
	type row struct {
		orderNo, requestID string
		user               int64
		status             order.Status
	}
	rows, err := store.DB.QueryContext(ctx, `SELECT order_no, user_id, request_id, status FROM order_info WHERE product_id = ?`, pid)
	if err != nil {
		t.Fatal(err)
	}
	byOrderNo := map[string]row{}
	for rows.Next() {
		var r row
		var st string
		if err := rows.Scan(&r.orderNo, &r.user, &r.requestID, &st); err != nil {
			t.Fatal(err)
		}
		r.status = order.Status(st)
		if _, dup := byOrderNo[r.orderNo]; dup {
			t.Errorf("orderNo %s stored twice", r.orderNo)
		}
		byOrderNo[r.orderNo] = r
	}
	rows.Close()

	// Every 202 is one WAITING_PAY order of its intent.
	for _, in := range intents {
		if in.status != http.StatusAccepted {
			continue
		}
		r, ok := byOrderNo[in.orderNo]
		switch {
		case !ok:
			t.Errorf("202 orderNo %s (user %d) was lost", in.orderNo, in.user)
		case r.user != in.user || r.requestID != in.requestID:
			t.Errorf("order %s belongs to %d/%s, answered to %d/%s", in.orderNo, r.user, r.requestID, in.user, in.requestID)
		case r.status != order.WaitingPay:
			t.Errorf("order %s is %s, want WAITING_PAY", in.orderNo, r.status)
		}
	}
	// An order without a 202 belongs to a request cut by the shutdown.
	cutWithOrder := map[*intent]string{}
	for no, r := range byOrderNo {
		in := byRequest[fmt.Sprintf("%d/%s", r.user, r.requestID)]
		switch {
		case in == nil:
			t.Errorf("order %s (%d/%s) matches no request", no, r.user, r.requestID)
		case in.status == http.StatusAccepted:
		case in.status == 0:
			cutWithOrder[in] = no
			if r.status != order.WaitingPay {
				t.Errorf("order %s of a cut request is %s, want WAITING_PAY", no, r.status)
			}
		default:
			t.Errorf("order %s exists for a request answered %d", no, in.status)
		}
	}
	if want := got202 + len(cutWithOrder); len(byOrderNo) != want {
		t.Errorf("%d orders stored, want %d (202s) + %d (cut requests that reserved)", len(byOrderNo), got202, len(cutWithOrder))
	}
	t.Logf("after restart: %d orders; %d of the %d cut requests had reserved", len(byOrderNo), len(cutWithOrder), errored)

	// Replays: a 202's intent answers 200 with the same orderNo; a cut
	// request answers its order if it reserved, else it is new now (202)
	// — never a second order.
	replay := func(in *intent) apiResult {
		res, err := d.call(ctx, "POST", "/api/orders", in.token, map[string]any{"productId": pid, "quantity": 1, "requestId": in.requestID})
		if err != nil {
			t.Fatalf("replay %d/%s: %v", in.user, in.requestID, err)
		}
		return res
	}
	newAfterRestart := 0
	for _, in := range intents {
		switch {
		case in.status == http.StatusAccepted:
			res := replay(in)
			// A replay answers the last status Redis knows (issue 18:
			// replays never read MySQL); the order-lock consumer records
			// WAITING_PAY there after its commit (pipeline.CacheStatus).
			if res.status != http.StatusOK || res.body["orderNo"] != in.orderNo || res.body["status"] != string(order.WaitingPay) {
				t.Errorf("replay of %d/%s: %d %v, want 200 with %s WAITING_PAY", in.user, in.requestID, res.status, res.body, in.orderNo)
			}
		case in.status == 0:
			res := replay(in)
			if no, ok := cutWithOrder[in]; ok {
				if res.status != http.StatusOK || res.body["orderNo"] != no {
					t.Errorf("replay of cut request %d/%s: %d %v, want 200 with its order %s", in.user, in.requestID, res.status, res.body, no)
				}
				continue
			}
			switch res.status {
			case http.StatusAccepted:
				newAfterRestart++
			case http.StatusConflict:
			default:
				t.Errorf("replay of cut request %d/%s that never reserved: %d %v", in.user, in.requestID, res.status, res.body)
			}
		}
	}

	wctx, wcancel = context.WithTimeout(ctx, 60*time.Second)
	rep, err = pipeline.WaitIdle(wctx, rdb, store, []int64{pid}, 200*time.Millisecond)
	wcancel()
	if err != nil {
		t.Fatalf("pipeline not idle after the replays: %v", err)
	}
	if !rep.OK {
		t.Errorf("reconcile: %s", strings.Join(rep.Failed(), "; "))
	}
	if n := rep.Products[0].Orders[order.WaitingPay][0]; n != int64(got202+len(cutWithOrder)+newAfterRestart) {
		t.Errorf("WAITING_PAY orders %d, want %d", n, got202+len(cutWithOrder)+newAfterRestart)
	}
	var dupRequests int
	if err := store.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT user_id, request_id FROM order_info
		GROUP BY user_id, request_id HAVING COUNT(*) > 1) d`).Scan(&dupRequests); err != nil || dupRequests != 0 {
		t.Errorf("requests with more than one order: %d %v", dupRequests, err)
	}

	took, err = second.stop(t, shutdownTimeout+5*time.Second)
	if err != nil {
		t.Errorf("second process exit: %v (want exit code 0)", err)
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		t.Errorf("exit code %d", exitErr.ExitCode())
	}
	t.Logf("second process exited in %s", took.Round(time.Millisecond))
}
