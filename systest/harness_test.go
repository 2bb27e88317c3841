package systest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
	"github.com/stampede-sh/stampede/systest/ports"
)

const jwtSecret = "faults-test-jwt-secret"

// The binary under test, built once per package run without -race.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range afterAllTests { // rabbitcluster_test.go
		f()
	}
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "stampede-faults-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "stampede")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/stampede-sh/stampede/cmd/stampede").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// env is one system test's world: its own MySQL database and vhost on the
// test servers (persistencetest, pipelinetest), its own redis-server, and
// the processes it started; so the system tests run in parallel.
type env struct {
	t     *testing.T
	ctx   context.Context
	bin   string
	store *persistence.Store    // direct, never through a proxy
	redis *redisServer          // the private redis-server; nil when redisAddr is a cluster
	rdb   redis.UniversalClient // direct to redisAddr

	redisAddr string // what the processes use: host:port, or a comma-separated cluster seed list

	mysqlDSN  string // what the processes use (maybe through a proxy)
	amqpURL   string // idem
	directAMQ string // the vhost URL, direct
	httpAddr  string // the gateway's address (fixed for restarts)
	base      string
	// bases are the base URLs of every gateway process when several run
	// (serveGateways); buyers are spread over them. Empty: base only.
	bases  []string
	dbName string // the label of the test's MySQL database and RabbitMQ vhost ("faults")

	client *http.Client
	admin  string
	nodeID atomic.Int64
	// tokenFor, if set, makes the buyers' bearer tokens (default: HS256
	// with jwtSecret).
	tokenFor func(user int64) string
	// procEnv is added to the environment of the processes started from
	// then on (KEY=value; without STAMPEDE_ variables of the test's own
	// environment when set).
	procEnv []string
	// lockDesign, if set, is the order-lock design of the processes started
	// from then on (--consumer-lock): "batch" for the tests of the
	// order-lock consumer's ORDER_CREATED path; default the binary's
	// (writer).
	lockDesign string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvFor(t, "faults")
}

// newEnvFor is newEnv on a MySQL database and a RabbitMQ vhost of the
// test's own, labelled name.
func newEnvFor(t *testing.T, name string) *env {
	t.Helper()
	e := baseEnv(t, name)
	e.redis = startRedisServer(t)
	e.redisAddr = e.redis.addr()
	e.rdb = redis.NewClient(&redis.Options{Addr: e.redis.addr(), DialTimeout: time.Second})
	t.Cleanup(func() { e.rdb.Close() })
	return e
}

// baseEnv is an env on database and vhost name, without Redis: the caller
// sets redis, redisAddr and rdb.
func baseEnv(t *testing.T, name string) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("system test: builds the binary and runs it against real services")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, bin: binary(t), dbName: name}
	e.store = persistencetest.New(t, name)
	e.directAMQ = pipelinetest.Vhost(t, name)
	e.amqpURL = e.directAMQ
	e.mysqlDSN = dsnFor(persistencetest.DSNFor(t, name), "")
	e.httpAddr = ports.Addr(t)
	e.base = "http://" + e.httpAddr
	e.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(e.client.CloseIdleConnections)
	e.admin, _ = auth.Issue([]byte(jwtSecret), 1, true, time.Hour)
	return e
}

// dsnFor is dsn with parseTime, through addr if not empty.
func dsnFor(dsn, addr string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		panic(err)
	}
	cfg.ParseTime = true
	if addr != "" {
		cfg.Addr = addr
		cfg.Timeout = 2 * time.Second
	}
	return cfg.FormatDSN()
}

// mysqlProxy routes the processes' MySQL connections through a new proxy.
func (e *env) mysqlProxy() *Proxy {
	name := e.dbName
	if name == "" {
		name = "faults"
	}
	dsn := persistencetest.DSNFor(e.t, name)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := NewProxy(cfg.Addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { p.Close() })
	e.mysqlDSN = dsnFor(dsn, p.Addr())
	return p
}

// amqpProxy routes the processes' AMQP connections through a new proxy.
func (e *env) amqpProxy() *Proxy {
	u, err := url.Parse(e.directAMQ)
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := NewProxy(u.Host)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	e.amqpURL = u.String()
	return p
}

// ---- private redis-server -------------------------------------------------

type redisServer struct {
	t    *testing.T
	port string
	dir  string
	args []string // redis-server's arguments (nil: the appendonly server of start)
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedisServer(t *testing.T) *redisServer {
	t.Helper()
	_, port, _ := net.SplitHostPort(ports.Addr(t))
	r := &redisServer{t: t, port: port, dir: t.TempDir()}
	r.start()
	t.Cleanup(func() { r.stop(syscall.SIGKILL) })
	return r
}

func (r *redisServer) addr() string { return "127.0.0.1:" + r.port }

// start runs redis-server on the same port and directory (appendonly, so a
// restart keeps stock, streams and consumer groups) and waits for PING.
func (r *redisServer) start() {
	r.t.Helper()
	cmd := r.command() // sentinel_test.go
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			r.t.Fatalf("redis-server on %s not answering: %v\n%s", r.port, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends sig and waits for the exit.
func (r *redisServer) stop(sig syscall.Signal) {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// ---- processes ------------------------------------------------------------

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
	name        string
	cmd         *exec.Cmd
	stderr      *lockedBuffer
	exited      chan struct{}
	metricsAddr string
}

// serve starts `stampede serve --roles roles` against the env's services.
// Every process gets a metrics listener; the gateway listens on e.httpAddr.
func (e *env) serve(name, roles string, extra ...string) *proc {
	e.t.Helper()
	httpAddr := ports.Addr(e.t)
	if strings.Contains(roles, "gateway") {
		httpAddr = e.httpAddr
	}
	return e.serveAt(name, roles, httpAddr, extra...)
}

// serveGateways starts n processes with roles (which must include gateway)
// named name0…: the first listens on e.httpAddr, the others on addresses of
// their own; e.bases lists them all and the sale spreads buyers over them.
// It waits until every one is ready.
func (e *env) serveGateways(n int, name, roles string, extra ...string) []*proc {
	e.t.Helper()
	var out []*proc
	e.bases = nil
	for i := range n {
		addr := e.httpAddr
		if i > 0 {
			addr = ports.Addr(e.t)
		}
		out = append(out, e.serveAt(fmt.Sprintf("%s%d", name, i), roles, addr, extra...))
		e.bases = append(e.bases, "http://"+addr)
	}
	for _, b := range e.bases {
		e.waitReadyAt(b, 30*time.Second)
	}
	return out
}

// baseFor is the gateway base URL that serves user.
func (e *env) baseFor(user int64) string {
	if len(e.bases) == 0 {
		return e.base
	}
	return e.bases[int(user%int64(len(e.bases)))]
}

// serveAt is serve with the gateway's listen address given. Processes run
// in development mode (the demo login and checkout, the built-in payment
// key) unless extra says --mode production.
func (e *env) serveAt(name, roles, httpAddr string, extra ...string) *proc {
	e.t.Helper()
	p := &proc{name: name, stderr: &lockedBuffer{}, exited: make(chan struct{}), metricsAddr: ports.Addr(e.t)}
	args := append([]string{"serve", "--mode", "development", "--roles", roles,
		"--mysql-dsn", e.mysqlDSN, "--redis-addr", e.redisAddr, "--amqp-url", e.amqpURL,
		"--http-addr", httpAddr, "--push-addr", ports.Addr(e.t), "--metrics-addr", p.metricsAddr,
		"--jwt-secret", jwtSecret, "--log-level", "warn", "--node-id", fmt.Sprint(e.nodeID.Add(1)),
		"--shutdown-timeout", "5s",
	}, extra...)
	if e.lockDesign != "" {
		args = append(args, "--consumer-lock", e.lockDesign)
	}
	p.cmd = exec.Command(e.bin, args...)
	if len(e.procEnv) > 0 {
		p.cmd.Env = append(cleanEnv(), e.procEnv...)
	}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	e.t.Cleanup(func() {
		p.kill()
		logs := p.stderr.String()
		if n := strings.Count(logs, "Deadlock found"); n > 0 {
			e.t.Logf("%s: %d MySQL deadlocks (1213) logged, %d ERROR lines", name, n, strings.Count(logs, `"level":"ERROR"`))
		}
		if e.t.Failed() {
			e.t.Logf("%s (pid %d, roles %s) stderr:\n%s", name, p.cmd.Process.Pid, roles, tail(p.stderr.String(), 6000))
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

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// metric sums the samples of the named series whose labels contain every
// one of labels ("handler=\"order-lock\"" …) on the process's /metrics.
func (p *proc) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("%s metrics: %v", p.name, err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// cpuSeconds is the process's user+system CPU time so far (Linux).
func (p *proc) cpuSeconds(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// waitReady polls the gateway's /readyz until 200.
func (e *env) waitReady(limit time.Duration) {
	e.t.Helper()
	e.waitReadyAt(e.base, limit)
}

// waitReadyAt polls base's /readyz until 200.
func (e *env) waitReadyAt(base string, limit time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		resp, err := e.client.Get(base + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("gateway %s not ready after %s: %s", base, limit, last)
}

// ---- HTTP -------------------------------------------------------------------

type answer struct {
	status  int
	body    map[string]any
	header  http.Header
	raw     string
	elapsed time.Duration
}

func (a answer) code() string {
	if m, ok := a.body["error"].(map[string]any); ok {
		s, _ := m["code"].(string)
		return s
	}
	return ""
}

func (e *env) call(method, path, token string, body any) (answer, error) {
	return e.callAt(e.base, method, path, token, body)
}

// callAt is call on the gateway at base.
func (e *env) callAt(base, method, path, token string, body any) (answer, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(e.ctx, method, base+path, rd)
	if err != nil {
		return answer{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := e.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw), elapsed: time.Since(start)}
	if err != nil {
		return a, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	dec.Decode(&a.body)
	return a, nil
}

// product creates a product on sale now with stock units, limit 1 per user.
func (e *env) product(stock int) int64 {
	e.t.Helper()
	now := time.Now().UTC()
	a, err := e.call("POST", "/api/admin/products", e.admin, map[string]any{
		"name": e.t.Name(), "price": 1000, "stock": stock, "perUserLimit": 1, "shards": 1,
		"saleStart": now.Add(-time.Second).Format(time.RFC3339), "saleEnd": now.Add(time.Hour).Format(time.RFC3339),
	})
	if err != nil || a.status != http.StatusCreated {
		e.t.Fatalf("create product: %d %s %v", a.status, a.raw, err)
	}
	id, _ := a.body["id"].(json.Number).Int64()
	return id
}

// intent is one buyer's purchase request and what the sale answered.
type intent struct {
	user      int64
	token     string
	requestID string
	status    int    // final answer; 0 = never answered
	orderNo   string // of a 202 or 200
	got202    bool
	attempts  int
	lastErr   error
}

func (e *env) newIntent(user int64) *intent {
	tok, _ := auth.Issue([]byte(jwtSecret), user, false, time.Hour)
	if e.tokenFor != nil {
		tok = e.tokenFor(user)
	}
	return &intent{user: user, token: tok, requestID: fmt.Sprintf("fault-%d-%d", user, time.Now().UnixNano()%1e6)}
}

// buy sends the intent once, to the user's gateway (baseFor).
func (e *env) buy(pid int64, in *intent) (answer, error) {
	in.attempts++
	a, err := e.callAt(e.baseFor(in.user), "POST", "/api/orders", in.token, map[string]any{"productId": pid, "quantity": 1, "requestId": in.requestID})
	if err != nil {
		in.lastErr = err
		return a, err
	}
	in.status = a.status
	if a.status == http.StatusAccepted || a.status == http.StatusOK {
		no, _ := a.body["orderNo"].(string)
		if in.orderNo != "" && no != in.orderNo {
			e.t.Errorf("user %d request %s: orderNo %s, earlier %s", in.user, in.requestID, no, in.orderNo)
		}
		in.orderNo = no
		in.got202 = in.got202 || a.status == http.StatusAccepted
	}
	return a, nil
}

// saleOptions shape a sale.
type saleOptions struct {
	workers  int
	retry    bool          // resend an unanswered (error, 503) request with the same requestId
	pace     time.Duration // pause after each request of a worker
	accepted *atomic.Int64 // counts 202s as they come
	// stop, once true, ends the sale early: the workers take no new intent
	// (an intent already taken is still sent, with its retries) and sale
	// returns only the intents taken.
	stop *atomic.Bool
}

// sale sends n intents of fresh users (userBase+i) from opt.workers
// goroutines and returns them (with opt.stop: the ones sent before it).
func (e *env) sale(pid int64, n int, userBase int64, opt saleOptions) []*intent {
	if opt.workers == 0 {
		opt.workers = 16
	}
	intents := make([]*intent, n)
	for i := range intents {
		intents[i] = e.newIntent(userBase + int64(i))
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range opt.workers {
		wg.Go(func() {
			for {
				if opt.stop != nil && opt.stop.Load() {
					return
				}
				i := int(next.Add(1)) - 1
				if i >= n || e.ctx.Err() != nil {
					return
				}
				in := intents[i]
				for try := 0; ; try++ {
					a, err := e.buy(pid, in)
					answered := err == nil && a.status != http.StatusServiceUnavailable
					if answered || !opt.retry || try > 200 || e.ctx.Err() != nil {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				if in.status == http.StatusAccepted && opt.accepted != nil {
					opt.accepted.Add(1)
				}
				if opt.pace > 0 {
					time.Sleep(opt.pace)
				}
			}
		})
	}
	wg.Wait()
	return intents[:min(int(next.Load()), n)]
}

// ---- checks -----------------------------------------------------------------

// settle waits for an idle pipeline, logs the recovery time from faultEnd,
// and checks docs/spec.md §5 for pid.
func (e *env) settle(pid int64, faultEnd time.Time, limit time.Duration) pipeline.Report {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, limit)
	defer cancel()
	rep, err := pipeline.WaitIdle(ctx, e.rdb, e.store, []int64{pid}, 100*time.Millisecond)
	d := time.Since(faultEnd)
	if err != nil {
		e.t.Fatalf("pipeline not idle %s after the fault ended: %v", d.Round(time.Millisecond), err)
	}
	e.t.Logf("recovery: %s", d.Round(time.Millisecond))
	rep, err = pipeline.Reconcile(e.ctx, e.rdb, e.store, []int64{pid})
	if err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	if !rep.OK {
		e.t.Errorf("docs/spec.md §5 reconcile failed: %s", strings.Join(rep.Failed(), "; "))
	}
	return rep
}

type orderRow struct {
	orderNo, requestID string
	user               int64
	status             order.Status
}

// orders returns pid's orders by orderNo, failing on a duplicate orderNo.
func (e *env) orders(pid int64) map[string]orderRow {
	e.t.Helper()
	rows, err := e.store.DB.QueryContext(e.ctx, `SELECT order_no, user_id, request_id, status FROM order_info WHERE product_id = ?`, pid)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]orderRow{}
	for rows.Next() {
		var r orderRow
		var st string
		if err := rows.Scan(&r.orderNo, &r.user, &r.requestID, &st); err != nil {
			e.t.Fatal(err)
		}
		r.status = order.Status(st)
		if _, dup := out[r.orderNo]; dup {
			e.t.Errorf("orderNo %s stored twice", r.orderNo)
		}
		out[r.orderNo] = r
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// checkIntents: every intent that got a 202 (or a 200 with an orderNo) is
// exactly one order of its user and requestId, in WAITING_PAY; no order
// exists without such an intent; the count of WAITING_PAY orders matches.
func (e *env) checkIntents(pid int64, intents []*intent, rep pipeline.Report) {
	e.t.Helper()
	orders := e.orders(pid)
	byReq := map[string]*intent{}
	want := 0
	bad := 0
	for _, in := range intents {
		byReq[fmt.Sprintf("%d/%s", in.user, in.requestID)] = in
		if in.orderNo == "" {
			continue
		}
		want++
		r, ok := orders[in.orderNo]
		switch {
		case !ok:
			bad++
			if bad < 10 {
				e.t.Errorf("accepted orderNo %s (user %d, 202 %v) was lost", in.orderNo, in.user, in.got202)
			}
		case r.user != in.user || r.requestID != in.requestID:
			e.t.Errorf("order %s belongs to %d/%s, answered to %d/%s", in.orderNo, r.user, r.requestID, in.user, in.requestID)
		case r.status != order.WaitingPay:
			bad++
			if bad < 10 {
				e.t.Errorf("order %s is %s, want WAITING_PAY", in.orderNo, r.status)
			}
		}
	}
	for no, r := range orders {
		if in := byReq[fmt.Sprintf("%d/%s", r.user, r.requestID)]; in == nil || in.orderNo != no {
			e.t.Errorf("order %s (%d/%s, %s) matches no answered request", no, r.user, r.requestID, r.status)
		}
	}
	if len(orders) != want {
		e.t.Errorf("%d orders stored, want %d (one per answered intent)", len(orders), want)
	}
	if len(rep.Products) == 1 {
		if n := rep.Products[0].Orders[order.WaitingPay][0]; n != int64(want) {
			e.t.Errorf("WAITING_PAY orders %d, want %d", n, want)
		}
	}
}

// consumedCreated is the number of distinct ORDER_CREATED events of pid's
// orders in the consume log of the order-lock consumer.
func (e *env) consumedCreated(pid int64) int {
	e.t.Helper()
	var n int
	err := e.store.DB.QueryRowContext(e.ctx, `SELECT COUNT(DISTINCT l.event_id) FROM mq_consume_log l
		JOIN order_info o ON l.event_id = CONCAT('created:', o.order_no)
		WHERE l.consumer_name = ? AND o.product_id = ?`, pipeline.ConsumerOrderLock, pid).Scan(&n)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// outboxCounts returns status → rows.
func (e *env) outboxCounts() map[string]int64 {
	out := map[string]int64{}
	rows, err := e.store.DB.QueryContext(e.ctx, `SELECT status, COUNT(*) FROM mq_outbox GROUP BY status`)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var n int64
		rows.Scan(&s, &n)
		out[s] = n
	}
	if rows.Err() != nil {
		return map[string]int64{} // as for a failed query: the caller polls again
	}
	return out
}

func (e *env) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.store.DB.QueryRowContext(e.ctx, q, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// replay resends every answered intent and checks it answers 200 with its
// orderNo.
func (e *env) replayAll(pid int64, intents []*intent) {
	e.t.Helper()
	bad := 0
	for _, in := range intents {
		if in.orderNo == "" {
			continue
		}
		want := in.orderNo
		a, err := e.call("POST", "/api/orders", in.token, map[string]any{"productId": pid, "quantity": 1, "requestId": in.requestID})
		if err != nil || a.status != http.StatusOK || a.body["orderNo"] != want {
			bad++
			if bad < 10 {
				e.t.Errorf("replay of %d/%s: %d %s %v, want 200 with %s", in.user, in.requestID, a.status, a.raw, err, want)
			}
		}
	}
	if bad > 0 {
		e.t.Errorf("%d replays did not answer their orderNo", bad)
	}
}

// logLines returns the process's log lines that contain s.
func (p *proc) logLines(s string) []string {
	var out []string
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}
