package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

// demoOptions shape the demo sale.
type demoOptions struct {
	once        bool
	buyers      int           // distinct buyers, one purchase intent each
	replays     int           // extra clicks that resend a buyer's request with the same requestId
	stock       int64         // units on sale
	payShare    float64       // share of accepted orders the demo pays
	cancelShare float64       // share it cancels; the rest time out
	payTimeout  time.Duration // the demo's pay timeout (short, so timeouts happen while you watch)
	idleWait    time.Duration // longest wait for the pipeline to go idle
}

func runDemo(ctx context.Context, args []string, stdout io.Writer) error {
	var o demoOptions
	cfg, err := parse("demo", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&o.once, "once", false, "exit after the audit (non-zero if an invariant fails)")
		fs.IntVar(&o.buyers, "buyers", 1000, "distinct simulated buyers")
		fs.IntVar(&o.replays, "replays", 300, "repeated clicks that reuse a buyer's requestId")
		fs.Int64Var(&o.stock, "stock", 100, "units on sale")
		fs.Float64Var(&o.payShare, "pay-share", 0.5, "share of accepted orders to pay")
		fs.Float64Var(&o.cancelShare, "cancel-share", 0.25, "share of accepted orders to cancel; the rest time out")
		fs.DurationVar(&o.payTimeout, "demo-pay-timeout", 5*time.Second, "pay timeout used by the demo")
		fs.DurationVar(&o.idleWait, "idle-wait", 90*time.Second, "longest wait for the pipeline to become idle")
	})
	if err != nil {
		return err
	}
	if o.buyers < 1 || o.stock < 0 || o.payShare < 0 || o.cancelShare < 0 || o.payShare+o.cancelShare > 1 {
		return fmt.Errorf("%w: bad demo options", errUsage)
	}
	if err := adoptQueueType(ctx, cfg, args, stdout); err != nil {
		return err
	}
	cfg.PayTimeout = o.payTimeout
	cfg.Migrate = true
	cfg.Roles = strings.Join(allRoles, ",")

	logger := newLogger("warn", os.Stderr)
	if cfg.LogLevel == "debug" {
		logger = newLogger("debug", os.Stderr)
	}
	srvCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	app, err := startApp(srvCtx, cfg, logger)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- app.wait() }()
	fail := func(err error) error {
		stopServer()
		<-served //nolint:errcheck // the error that made the demo fail is returned
		return err
	}

	base := "http://" + cfg.HTTPAddr
	fmt.Fprintf(stdout, "stampede demo: every role running, gateway on %s\n", base)
	if err := waitReady(ctx, base, 30*time.Second); err != nil {
		return fail(err)
	}
	d := &demo{base: base, secret: []byte(cfg.JWTSecret), client: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 2048, MaxConnsPerHost: 0},
	}}
	ok, err := d.run(ctx, app, o, stdout)
	if err != nil {
		return fail(err)
	}
	if o.once {
		stopServer()
		if err := <-served; err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(stdout, "shutdown:", err)
		}
		if !ok {
			return errors.New("demo: an invariant FAILED")
		}
		return nil
	}
	fmt.Fprintf(stdout, "\nStill serving on %s (storefront, API, /metrics). Ctrl-C to stop.\n", base)
	err = <-served
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	if err == nil && !ok {
		err = errors.New("demo: an invariant FAILED")
	}
	return err
}

type demo struct {
	base   string
	secret []byte
	client *http.Client
}

type apiResult struct {
	status int
	code   string // error code, "" on success
	body   map[string]any
}

func (d *demo) call(ctx context.Context, method, path, token string, body any) (apiResult, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return apiResult{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, rd)
	if err != nil {
		return apiResult{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return apiResult{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiResult{}, err
	}
	r := apiResult{status: resp.StatusCode, body: map[string]any{}}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&r.body); err != nil {
		return r, fmt.Errorf("%s %s: %d with non-JSON body %q", method, path, resp.StatusCode, raw)
	}
	if e, ok := r.body["error"].(map[string]any); ok {
		r.code, _ = e["code"].(string)
	}
	return r, nil
}

func waitReady(ctx context.Context, base string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("demo: gateway not ready after %s: %s", limit, last)
}

func randomID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

type purchase struct {
	user      int64
	token     string
	requestID string
	orderNo   string
}

func (d *demo) run(ctx context.Context, app *app, o demoOptions, out io.Writer) (bool, error) {
	admin, err := auth.Issue(d.secret, 1, true, time.Hour)
	if err != nil {
		return false, err
	}
	pid, err := d.createProduct(ctx, admin, o, out)
	if err != nil {
		return false, err
	}
	buyers, err := d.login(ctx, o.buyers)
	if err != nil {
		return false, err
	}
	rr, err := d.rush(ctx, pid, buyers, o, out)
	if err != nil {
		return false, err
	}
	ok1 := d.auditRush(ctx, app, pid, rr, o, out)
	nPay, nCancel, err := d.checkout(ctx, rr.winners, o, out)
	if err != nil {
		return false, err
	}
	ok2, err := d.auditCheckout(ctx, app, pid, o, nPay, nCancel, len(rr.winners)-nPay-nCancel, out)
	if err != nil {
		return false, err
	}
	all := ok1 && ok2
	verdict := "PASS"
	if !all {
		verdict = "FAIL"
	}
	fmt.Fprintf(out, "\nDEMO %s\n", verdict)
	return all, nil
}

// createProduct creates the sale's product through the admin API.
func (d *demo) createProduct(ctx context.Context, admin string, o demoOptions, out io.Writer) (int64, error) {
	now := time.Now().UTC()
	name := "Demo phone " + now.Format("15:04:05")
	r, err := d.call(ctx, "POST", "/api/admin/products", admin, map[string]any{
		"name": name, "price": 49900, "stock": o.stock, "perUserLimit": 1, "shards": 1,
		"saleStart": now.Add(-time.Second).Format(time.RFC3339), "saleEnd": now.Add(24 * time.Hour).Format(time.RFC3339),
	})
	if err != nil || r.status != http.StatusCreated {
		return 0, fmt.Errorf("demo: create product: %d %v %v", r.status, r.body, err)
	}
	pid, err := r.body["id"].(json.Number).Int64()
	if err != nil {
		return 0, fmt.Errorf("demo: product id: %v", r.body["id"])
	}
	fmt.Fprintf(out, "product %d %q: %d units at 499.00, 1 per buyer\n", pid, name, o.stock)
	return pid, nil
}

// login logs n buyers in through the demo identity provider; user ids are
// fresh per run so earlier demos' per-user limits don't apply.
func (d *demo) login(ctx context.Context, n int) ([]*purchase, error) {
	firstUser := time.Now().UnixMilli() % 1_000_000_000 * 1000
	buyers := make([]*purchase, n)
	for i := range buyers {
		uid := firstUser + int64(i) + 1
		lr, err := d.call(ctx, "POST", "/api/auth/login", "", map[string]any{"userId": uid})
		if err != nil || lr.status != http.StatusOK {
			return nil, fmt.Errorf("demo: login: %d %v %v", lr.status, lr.body, err)
		}
		buyers[i] = &purchase{user: uid, token: lr.body["token"].(string), requestID: "demo-" + randomID(8)}
	}
	return buyers, nil
}

// rushResult is what the rush's answers were.
type rushResult struct {
	byCode      map[string]int // "202", "409 SOLD_OUT", …
	winners     []*purchase    // buyers answered with an orderNo, by user id
	conflicting int            // intents answered with more than one orderNo
}

// rush has every buyer click once and o.replays clicks repeat a buyer's
// request (same requestId), all released at the same instant.
func (d *demo) rush(ctx context.Context, pid int64, buyers []*purchase, o demoOptions, out io.Writer) (rushResult, error) {
	type click struct {
		p      *purchase
		replay bool
	}
	clicks := make([]click, 0, len(buyers)+o.replays)
	for _, p := range buyers {
		clicks = append(clicks, click{p: p})
	}
	for i := range o.replays {
		clicks = append(clicks, click{p: buyers[(i*7)%len(buyers)], replay: true})
	}
	var mu sync.Mutex
	byCode := map[string]int{}
	firstNo := map[*purchase]map[string]bool{} // orderNos each intent was answered with
	var wg sync.WaitGroup
	start := make(chan struct{})
	var callErrs []error
	for _, c := range clicks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := d.call(ctx, "POST", "/api/orders", c.p.token,
				map[string]any{"productId": pid, "quantity": 1, "requestId": c.p.requestID})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				callErrs = append(callErrs, err)
				return
			}
			key := fmt.Sprintf("%d", res.status)
			if res.code != "" {
				key += " " + res.code
			}
			byCode[key]++
			if no, _ := res.body["orderNo"].(string); no != "" {
				if firstNo[c.p] == nil {
					firstNo[c.p] = map[string]bool{}
				}
				firstNo[c.p][no] = true
				c.p.orderNo = no
			}
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	rush := time.Since(t0)
	if len(callErrs) > 0 {
		return rushResult{}, fmt.Errorf("demo: %d requests failed, first: %v", len(callErrs), callErrs[0])
	}
	rr := rushResult{byCode: byCode}
	for _, p := range buyers {
		if len(firstNo[p]) > 1 {
			rr.conflicting++
		}
		if p.orderNo != "" {
			rr.winners = append(rr.winners, p)
		}
	}
	sort.Slice(rr.winners, func(i, j int) bool { return rr.winners[i].user < rr.winners[j].user })
	fmt.Fprintf(out, "\n== The rush: %d clicks (%d buyers + %d repeated clicks) in %s\n", len(clicks), len(buyers), o.replays, rush.Round(time.Millisecond))
	printCounts(out, byCode)
	fmt.Fprintf(out, "  intents answered with more than one orderNo: %d\n", rr.conflicting)
	return rr, nil
}

// auditRush waits for the pipeline to carry the rush's orders to
// WAITING_PAY and checks what it must have done.
func (d *demo) auditRush(ctx context.Context, app *app, pid int64, rr rushResult, o demoOptions, out io.Writer) bool {
	wctx, cancel := context.WithTimeout(ctx, o.idleWait)
	idleStart := time.Now()
	rep, err := pipeline.WaitIdle(wctx, app.rdb, app.store, []int64{pid}, 100*time.Millisecond)
	cancel()
	if err != nil {
		fmt.Fprintln(out, "  pipeline did not become idle:", err)
	}
	if took := time.Since(idleStart); took > o.payTimeout/2 {
		// The checkout below must start well within the pay timeout.
		fmt.Fprintf(out, "  the pipeline took %s to carry the orders to WAITING_PAY, more than half the %s pay timeout:\n"+
			"  is it busy with other work in this database (see `stampede reconcile`), or the machine loaded?\n",
			took.Round(time.Millisecond), o.payTimeout)
	}
	ok := printAudit(out, "After the rush (pipeline idle)", rep, pid, app.store, ctx)
	ok = expect(out, "accepted = stock", int64(rr.byCode["202"]), min(o.stock, int64(o.buyers))) && ok
	var waiting int64 // the product is missing from a report the wait gave up on (printAudit said so)
	if len(rep.Products) == 1 {
		waiting = rep.Products[0].Orders[order.WaitingPay][0]
	}
	ok = expect(out, "WAITING_PAY orders = accepted", waiting, int64(rr.byCode["202"])) && ok
	return expect(out, "intents with two orderNos", int64(rr.conflicting), 0) && ok
}

// checkout pays a share of the winners' orders, cancels a share and leaves
// the rest to time out.
func (d *demo) checkout(ctx context.Context, winners []*purchase, o demoOptions, out io.Writer) (nPay, nCancel int, err error) {
	nPay = int(float64(len(winners)) * o.payShare)
	nCancel = int(float64(len(winners)) * o.cancelShare)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var callErrs []error
	lifecycle := map[string]int{}
	for i, p := range winners {
		var path, what string
		switch {
		case i < nPay:
			path, what = "/api/orders/"+p.orderNo+"/pay", "pay"
		case i < nPay+nCancel:
			path, what = "/api/orders/"+p.orderNo+"/cancel", "cancel"
		default:
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := d.call(ctx, "POST", path, p.token, nil)
			// A storefront tries a 503 again (the gateway's MySQL call timed
			// out or its breaker is open, as on a loaded machine): pay and
			// cancel are safe to repeat — a second pay of an order the first
			// one paid answers 409 INVALID_STATE and changes nothing.
			retries := 0
			for ; err == nil && res.status == http.StatusServiceUnavailable && retries < 5; retries++ {
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(retries+1) * 300 * time.Millisecond):
				}
				res, err = d.call(ctx, "POST", path, p.token, nil)
			}
			mu.Lock()
			defer mu.Unlock()
			if retries > 0 {
				lifecycle[what+" tried again after 503"] += retries
			}
			if err != nil {
				callErrs = append(callErrs, err)
				return
			}
			// "pay 200 PAID", or "pay 409 INVALID_STATE" for a refusal.
			detail, _ := res.body["status"].(string)
			if e, ok := res.body["error"].(map[string]any); ok {
				detail, _ = e["code"].(string)
			}
			lifecycle[fmt.Sprintf("%s %d %s", what, res.status, detail)]++
		}()
	}
	wg.Wait()
	if len(callErrs) > 0 {
		return 0, 0, fmt.Errorf("demo: %d lifecycle requests failed, first: %v", len(callErrs), callErrs[0])
	}
	nTimeout := len(winners) - nPay - nCancel
	fmt.Fprintf(out, "\n== The checkout: %d paid, %d cancelled by their buyers, %d left to time out (pay timeout %s)\n", nPay, nCancel, nTimeout, o.payTimeout)
	printCounts(out, lifecycle)
	return nPay, nCancel, nil
}

// auditCheckout waits out the pay deadline, then for the sweeper or close
// queue and the release consumer, and checks every order's end.
func (d *demo) auditCheckout(ctx context.Context, app *app, pid int64, o demoOptions, nPay, nCancel, nTimeout int, out io.Writer) (bool, error) {
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-time.After(o.payTimeout + 500*time.Millisecond):
	}
	wctx, cancel := context.WithTimeout(ctx, o.idleWait)
	rep, err := waitSettled(wctx, app, pid)
	cancel()
	if err != nil {
		fmt.Fprintln(out, "  pipeline did not settle:", err)
	}
	ok := printAudit(out, "After checkout and timeouts", rep, pid, app.store, ctx)
	reasons, err := closeReasons(ctx, app.store, pid)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(out, "  cancelled by user %d, by pay timeout %d\n", reasons[string(order.ReasonUser)], reasons[string(order.ReasonTimeout)])
	var p pipeline.ProductAudit // zero when missing from the report (printAudit said so)
	if len(rep.Products) == 1 {
		p = rep.Products[0]
	}
	ok = expect(out, "PAID orders", p.Orders[order.Paid][0], int64(nPay)) && ok
	ok = expect(out, "cancelled by user", reasons[string(order.ReasonUser)], int64(nCancel)) && ok
	ok = expect(out, "cancelled by pay timeout", reasons[string(order.ReasonTimeout)], int64(nTimeout)) && ok
	return expect(out, "WAITING_PAY left", p.Orders[order.WaitingPay][0], 0) && ok, nil
}

// waitSettled waits until no order of pid is WAITING_PAY any more and the
// pipeline is idle.
func waitSettled(ctx context.Context, app *app, pid int64) (pipeline.Report, error) {
	for {
		rep, err := pipeline.WaitIdle(ctx, app.rdb, app.store, []int64{pid}, 100*time.Millisecond)
		if err != nil {
			return rep, err
		}
		if len(rep.Products) == 1 && rep.Products[0].Orders[order.WaitingPay][0] == 0 {
			return rep, nil
		}
		select {
		case <-ctx.Done():
			if len(rep.Products) != 1 {
				return rep, fmt.Errorf("product %d missing from the reconciliation", pid)
			}
			return rep, fmt.Errorf("orders still WAITING_PAY: %d", rep.Products[0].Orders[order.WaitingPay][0])
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func closeReasons(ctx context.Context, store *persistence.Store, pid int64) (map[string]int64, error) {
	rows, err := store.DB.QueryContext(ctx, `SELECT COALESCE(close_reason, ''), COUNT(*) FROM order_info
		WHERE product_id = ? AND status = 'CANCELLED' GROUP BY close_reason`, pid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var r string
		var n int64
		if err := rows.Scan(&r, &n); err != nil {
			return nil, err
		}
		out[r] = n
	}
	return out, rows.Err()
}

func printCounts(out io.Writer, m map[string]int) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(out, "  %-40s %6d\n", k, m[k])
	}
}

func expect(out io.Writer, what string, got, want int64) bool {
	v := "PASS"
	if got != want {
		v = "FAIL"
	}
	fmt.Fprintf(out, "  [%s] %s: %d (want %d)\n", v, what, got, want)
	return got == want
}

// printAudit prints one product's reconciliation and returns whether every
// invariant passed.
func printAudit(out io.Writer, title string, rep pipeline.Report, pid int64, store *persistence.Store, ctx context.Context) bool {
	fmt.Fprintf(out, "\n== Audit: %s\n", title)
	if len(rep.Products) != 1 {
		fmt.Fprintf(out, "  [FAIL] product %d missing from the report\n", pid)
		return false
	}
	p := rep.Products[0]
	fmt.Fprintf(out, "  orders by status:")
	for _, s := range order.Statuses {
		fmt.Fprintf(out, " %s %d", s, p.Orders[s][0])
	}
	fmt.Fprintf(out, "\n  redis available %d | mysql available %d, locked %d, sold %d | total %d, adjust %d\n",
		p.RedisAvailable, p.MySQL.Available, p.MySQL.Locked, p.MySQL.Sold, p.Total, p.Adjust)
	fmt.Fprintf(out, "  outbox: %v\n", rep.Outbox)
	ok := true
	for _, c := range append(append([]pipeline.Check{}, p.Checks...), rep.Checks...) {
		v := "PASS"
		if !c.OK {
			v, ok = "FAIL", false
		}
		fmt.Fprintf(out, "  [%s] invariant %s — %s\n", v, c.Name, c.Detail)
	}
	return ok
}

// adoptQueueType lets the demo and the in-process benchmark run on a vhost
// that already holds Stampede's queues of the other type (classic queues
// from a run before quorum became the default, typically in "/"): unless
// the queue type was chosen explicitly (-amqp-queue-type or
// STAMPEDE_AMQP_QUEUE_TYPE), it declares the configured topology once and,
// if RabbitMQ says the queues exist as the other type, switches cfg to that
// type and says so on out. Any other declaration failure is returned; a
// broker that does not answer within 5s is left to the roles' own retries.
func adoptQueueType(ctx context.Context, cfg *Config, args []string, out io.Writer) error {
	if _, set := os.LookupEnv("STAMPEDE_AMQP_QUEUE_TYPE"); set {
		return nil
	}
	for _, a := range args {
		if name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); name == "amqp-queue-type" && strings.HasPrefix(a, "-") {
			return nil
		}
	}
	conn, err := pipeline.NewConn(pipeline.ConnConfig{URL: cfg.AMQPURL, Name: "stampede-queue-type-probe", Topology: cfg.topology(),
		MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ch, err := conn.Channel(pctx)
	if err == nil {
		ch.Close()
		return nil
	}
	var mm *pipeline.QueueMismatchError
	if !errors.As(err, &mm) {
		return nil
	}
	if mm.Existing == "" || mm.Existing == mm.Configured {
		return err
	}
	fmt.Fprintf(out, "stampede: vhost %s already holds %s queues (queue %s); using %s queues for this run. "+
		"Set STAMPEDE_AMQP_QUEUE_TYPE to choose; a queue's type changes only by deleting it.\n", mm.Vhost, mm.Existing, mm.Queue, mm.Existing)
	cfg.AMQPQueueType = string(mm.Existing)
	return nil
}
