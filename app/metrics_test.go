package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	amqp "github.com/rabbitmq/amqp091-go"
	"gopkg.in/yaml.v3"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/lua/luatest"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
	"github.com/stampede-sh/stampede/systest/ports"
)

// Labels of Redis databases of this package's tests besides luatest.DBCmd.
const (
	redisDBSigterm = luatest.DBCmd + 8
	redisDBMetrics = luatest.DBCmd + 9
)

const alertsFile = "../deploy/prometheus/alerts.yml"
const dashboardFile = "../deploy/grafana/dashboards/stampede.json"
const runbookFile = "../docs/runbook.md"

// runbookAnchors returns the anchors of the runbook's headings as GitHub
// renders them: lower case, punctuation other than - and _ dropped, spaces
// as -.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// scrape is one parsed /metrics answer.
type scrape map[string]*dto.MetricFamily

func getMetrics(t *testing.T, base string) scrape {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value sums the series of family name whose labels include want (counter,
// gauge, or a histogram's sample count).
func (s scrape) value(name string, want ...string) float64 {
	f := s[name]
	if f == nil {
		return -1
	}
	return pipelinetest.SumSeries(f, want...)
}

// TestMetricsDuringSale runs every role in this process, sells through the
// HTTP API and checks /metrics: the accepted counter equals the 202s, the
// outbox backlog and intake backlog return to zero, and a poison message
// published to stampede.order.created is counted as dead-lettered. It then
// checks that the alert rules and the dashboard only use series the binary
// registers.
func TestMetricsDuringSale(t *testing.T) {
	t.Parallel() // the test's own databases, vhost and ports
	if testing.Short() {
		t.Skip("end-to-end")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store := persistencetest.New(t, "metrics")
	rdb := luatest.New(t, redisDBMetrics)
	amqpURL := pipelinetest.Vhost(t, "metrics")
	httpAddr, pprofAddr, metricsAddr := ports.Addr(t), ports.Addr(t), ports.Addr(t)
	cfg, err := parse("serve", []string{"--migrate", "--pprof-addr", pprofAddr, "--metrics-addr", metricsAddr,
		"--mysql-dsn", persistencetest.DSNFor(t, "metrics") + "?parseTime=true",
		"--redis-addr", luatest.Addr(), "--redis-db", fmt.Sprint(rdb.Options().DB),
		"--amqp-url", amqpURL, "--http-addr", httpAddr, "--push-addr", ports.Addr(t),
		"--reconcile-interval", "300ms", "--sweep-interval", "200ms",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	appCtx, stopApp := context.WithCancel(ctx)
	a, err := startApp(appCtx, cfg, newLogger("error", os.Stderr))
	if err != nil {
		stopApp()
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopApp()
			if err := a.wait(); err != nil {
				t.Errorf("app: %v", err)
			}
		}
	}
	defer stop()
	base := "http://" + httpAddr
	if err := waitReady(ctx, base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// pprof and the extra metrics listener are on their own addresses only.
	for _, c := range []struct {
		url  string
		want int
	}{
		{"http://" + pprofAddr + "/debug/pprof/", 200},
		{"http://" + pprofAddr + "/debug/pprof/goroutine?debug=1", 200},
		{"http://" + metricsAddr + "/metrics", 200},
		{"http://" + metricsAddr + "/debug/pprof/", 404},
		{base + "/debug/pprof/", 404},
	} {
		resp, err := http.Get(c.url)
		if err != nil {
			t.Fatalf("GET %s: %v", c.url, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET %s: %d, want %d", c.url, resp.StatusCode, c.want)
		}
	}

	d := &demo{base: base, secret: []byte(cfg.JWTSecret), client: &http.Client{Timeout: 30 * time.Second}}
	defer d.client.CloseIdleConnections()
	admin, _ := auth.Issue(d.secret, 1, true, time.Hour)
	now := time.Now().UTC()
	r, err := d.call(ctx, "POST", "/api/admin/products", admin, map[string]any{
		"name": "metrics phone", "price": 1000, "stock": 40, "perUserLimit": 1, "shards": 1,
		"saleStart": now.Add(-time.Second).Format(time.RFC3339), "saleEnd": now.Add(time.Hour).Format(time.RFC3339),
	})
	if err != nil || r.status != http.StatusCreated {
		t.Fatalf("create product: %d %v %v", r.status, r.body, err)
	}
	pid, _ := r.body["id"].(json.Number).Int64()

	before := getMetrics(t, base)
	if v := before.value("stampede_reserve_total", "result", "accepted"); v != 0 {
		t.Fatalf("accepted before the sale = %v", v)
	}

	// 60 buyers for 40 units, plus 10 repeated clicks.
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range 70 {
		user := int64(1000 + i%60)
		wg.Go(func() {
			tok, _ := auth.Issue(d.secret, user, false, time.Hour)
			res, err := d.call(ctx, "POST", "/api/orders", tok, map[string]any{"productId": pid, "quantity": 1, "requestId": fmt.Sprintf("m-%d", user)})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("order: %v", err)
				return
			}
			codes[res.status]++
		})
	}
	wg.Wait()
	if codes[202] != 40 {
		t.Fatalf("answers %v, want 40 × 202", codes)
	}

	during := getMetrics(t, base)
	for _, c := range []struct {
		what string
		got  float64
		want int
	}{
		{"reserve_total{accepted}", during.value("stampede_reserve_total", "result", "accepted"), codes[202]},
		{"reserve_total{sold_out}+{insufficient}", during.value("stampede_reserve_total", "result", "sold_out") + during.value("stampede_reserve_total", "result", "insufficient"), codes[409]},
		{"reserve_total{duplicate}", during.value("stampede_reserve_total", "result", "duplicate"), codes[200]},
		{"http 202s of POST /api/orders", during.value("stampede_http_request_duration_seconds", "route", "/api/orders", "status", "202"), codes[202]},
	} {
		if c.got != float64(c.want) {
			t.Errorf("%s = %v, want %d (answers %v)", c.what, c.got, c.want, codes)
		}
	}

	if v := during.value("stampede_lua_call_duration_seconds", "script", "reserve"); v < float64(codes[202]) {
		t.Errorf("lua reserve calls = %v, fewer than the 202s", v)
	}

	// The pipeline drains: outbox and intake backlogs back to zero.
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	if _, err := pipeline.WaitIdle(wctx, rdb, store, []int64{pid}, 100*time.Millisecond); err != nil {
		t.Fatalf("pipeline idle: %v", err)
	}
	wcancel()
	var idle scrape
	pipelinetest.WaitFor(t, 20*time.Second, "backlogs at zero in /metrics", func() (bool, string) {
		idle = getMetrics(t, base)
		unsent := idle.value("stampede_outbox_rows", "status", "NEW") + idle.value("stampede_outbox_rows", "status", "RETRY") +
			idle.value("stampede_outbox_rows", "status", "SENDING")
		age := idle.value("stampede_outbox_oldest_unsent_age_seconds")
		backlog := idle.value("stampede_intake_backlog_entries")
		drift := idle.value("stampede_reconcile_drift", "product", fmt.Sprint(pid))
		return unsent == 0 && age == 0 && backlog == 0 && drift == 0,
			fmt.Sprintf("unsent %v, oldest age %v, intake backlog %v, drift %v", unsent, age, backlog, drift)
	})
	// The reconciliation round exports the sale's units and orders and the
	// (empty) refund queue.
	pl := fmt.Sprint(pid)
	pipelinetest.WaitFor(t, 20*time.Second, "sale series in /metrics", func() (bool, string) {
		m := getMetrics(t, base)
		avail, locked, sold := m.value("stampede_sale_units", "product", pl, "state", "available"),
			m.value("stampede_sale_units", "product", pl, "state", "locked"), m.value("stampede_sale_units", "product", pl, "state", "sold")
		waiting := m.value("stampede_sale_orders", "product", pl, "status", "WAITING_PAY")
		processing := m.value("stampede_sale_orders", "product", pl, "status", "PROCESSING")
		refunds := m.value("stampede_refunds_pending")
		return avail == 0 && locked == 40 && sold == 0 && waiting == 40 && processing == 0 && refunds == 0,
			fmt.Sprintf("units available %v locked %v sold %v, orders WAITING_PAY %v PROCESSING %v, refunds pending %v",
				avail, locked, sold, waiting, processing, refunds)
	})

	// The default (writer) design stores the 40 orders WAITING_PAY in the
	// writers' batch transactions: one ORDER_STATUS_BATCH row per product and
	// batch (at least one, at most 40) and no ORDER_CREATED message, so the
	// order-lock consumer has nothing to do.
	sent := idle.value("stampede_outbox_rows", "status", "SENT")
	if sent < 1 || sent > 40 {
		t.Errorf("outbox SENT rows = %v, want 1..40 (status batches of the writer design)", sent)
	}
	if v := idle.value("stampede_writer_entries_total", "outcome", "written"); v != 40 {
		t.Errorf("writer written = %v, want 40", v)
	}
	if v := idle.value("stampede_consumer_messages_total", "handler", pipeline.ConsumerOrderLock, "outcome", pipeline.OutcomeOK); v != 0 {
		t.Errorf("order-lock ok = %v, want 0 (the writer design publishes no ORDER_CREATED)", v)
	}
	if v := idle.value("stampede_relay_publishes_total", "outcome", "acked"); v < sent {
		t.Errorf("relay acked = %v, want at least the %v SENT rows", v, sent)
	}
	for _, name := range []string{"stampede_writer_batch_entries", "stampede_writer_commit_duration_seconds", "stampede_relay_publish_confirm_duration_seconds"} {
		if v := idle.value(name); v <= 0 {
			t.Errorf("%s has no samples", name)
		}
	}
	if v := idle.value("stampede_rabbitmq_queue_consumers", "queue", pipeline.QueueOrderCreated); v < 1 {
		t.Errorf("consumers on %s = %v", pipeline.QueueOrderCreated, v)
	}
	if v := idle.value("stampede_state_up"); v != 3 {
		t.Errorf("state_up sum = %v, want redis, mysql and rabbitmq up", v)
	}

	// A poison message on the order-created queue is rejected and counted.
	deadBefore := idle.value("stampede_consumer_messages_total", "handler", pipeline.ConsumerOrderLock, "outcome", pipeline.OutcomeDeadLetter)
	dlqBefore := idle.value("stampede_dlq_depth", "source", "consumer_rejected")
	publishPoison(t, amqpURL)
	pipelinetest.WaitFor(t, 20*time.Second, "poison message counted", func() (bool, string) {
		m := getMetrics(t, base)
		dead := m.value("stampede_consumer_messages_total", "handler", pipeline.ConsumerOrderLock, "outcome", pipeline.OutcomeDeadLetter)
		dlq := m.value("stampede_dlq_depth", "source", "consumer_rejected")
		return dead == deadBefore+1 && dlq == dlqBefore+1, fmt.Sprintf("dead_letter %v→%v, dlq_depth %v→%v", deadBefore, dead, dlqBefore, dlq)
	})

	// Every stampede_* name used by the alert rules and the dashboard is
	// registered by the binary.
	fams, err := a.tel.reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+suffix] = true
			}
		}
	}
	stop()
	for _, file := range []string{alertsFile, dashboardFile} {
		for _, expr := range exprsOf(t, file) {
			if unknown := unknownMetrics(expr, names); len(unknown) > 0 {
				t.Errorf("%s: expression uses unregistered metrics %v: %s", file, unknown, expr)
			}
		}
	}
}

func publishPoison(t *testing.T, amqpURL string) {
	t.Helper()
	ch := pipelinetest.Channel(t, amqpURL)
	err := ch.PublishWithContext(context.Background(), "", pipeline.QueueOrderCreated, true, false, amqp.Publishing{
		MessageId: "poison-1", ContentType: "application/json", Body: []byte(`{"this is": "not an event"`),
	})
	if err != nil {
		t.Fatal(err)
	}
}

var metricName = regexp.MustCompile(`\b(stampede_[a-zA-Z0-9_]+|go_[a-z0-9_]+|process_[a-z0-9_]+)\b`)

// unknownMetrics lists the metric names in expr that names lacks (names
// holds a histogram's _bucket, _sum and _count series too).
func unknownMetrics(expr string, names map[string]bool) []string {
	var out []string
	for _, n := range metricName.FindAllString(expr, -1) {
		if !names[n] {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// alertRules is the part of a Prometheus rules file the test checks.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// exprsOf returns the PromQL expressions of the alert rules or of the
// dashboard's panels.
func exprsOf(t *testing.T, file string) []string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if strings.HasSuffix(file, ".json") {
		dash := parseDashboard(t, raw)
		for _, p := range dash.Panels {
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
		}
		for _, v := range dash.Templating.List {
			out = append(out, v.Query.Query)
		}
		return out
	}
	var rules alertRules
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}

// TestAlertRules checks deploy/prometheus/alerts.yml: with promtool when it
// is on PATH (scripts/tools.sh installs it), and always against the shape
// every rule must have. TestMetricsDuringSale checks its metric names.
func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	if len(rules.Groups) == 0 {
		t.Fatal("alerts.yml has no groups")
	}
	anchors := runbookAnchors(t)
	seen := map[string]bool{}
	for _, g := range rules.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a name and rules are required", g.Name)
		}
		for _, r := range g.Rules {
			switch {
			case r.Alert == "":
				t.Errorf("group %s: rule without alert name (expr %q)", g.Name, r.Expr)
			case seen[r.Alert]:
				t.Errorf("alert %s defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: empty expr", r.Alert)
			}
			if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
			switch r.Labels["severity"] {
			case "page", "ticket":
			default:
				t.Errorf("%s: labels.severity %q, want page or ticket", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: annotations.summary and annotations.description are required", r.Alert)
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("%s: unbalanced parentheses in %q", r.Alert, r.Expr)
			}
			// Every alert links its own section of the runbook.
			u := r.Annotations["runbook_url"]
			file, anchor, ok := strings.Cut(u, "#")
			switch {
			case u == "":
				t.Errorf("%s: annotations.runbook_url is required", r.Alert)
			case !ok || !strings.HasPrefix(u, "https://") || !strings.HasSuffix(file, "/docs/runbook.md"):
				t.Errorf("%s: runbook_url %q is not https://…/docs/runbook.md#<section>", r.Alert, u)
			case !anchors[anchor]:
				t.Errorf("%s: runbook_url anchor #%s is no heading of %s", r.Alert, anchor, runbookFile)
			case anchor != strings.ToLower(r.Alert):
				t.Errorf("%s: runbook_url points at #%s, not at the alert's own section", r.Alert, anchor)
			}
		}
	}
	for _, want := range []string{"StampedeOutboxBacklogOld", "StampedeDeadLetterGrowing", "StampedeConsumerDeadLetters",
		"StampedeReconcileDrift", "StampedeOrdersStuckProcessing", "StampedeConsumerRetrying", "StampedeRefundsWaiting"} {
		if !seen[want] {
			t.Errorf("alert %s missing", want)
		}
	}

	for a := range anchors {
		found := false
		for name := range seen {
			found = found || strings.ToLower(name) == a
		}
		if !found && a != "stampede-runbook" {
			t.Errorf("%s: section #%s belongs to no alert", runbookFile, a)
		}
	}

	t.Run("promtool", func(t *testing.T) {
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Skip("promtool not on PATH (bash scripts/tools.sh installs it); the schema checks above ran")
		}
		for _, args := range [][]string{{"check", "rules", alertsFile}, {"check", "config", "../deploy/prometheus/prometheus.yml"}} {
			out, err := exec.Command(promtool, args...).CombinedOutput()
			if err != nil {
				t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})
}

// dashboard is the part of the Grafana dashboard the tests check.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Datasource struct {
				Type string `json:"type"`
			} `json:"datasource"`
			Query struct {
				Query string `json:"query"`
			} `json:"query"`
			IncludeAll bool `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
}

func parseDashboard(t *testing.T, raw []byte) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// rangeSelector matches the range of a range vector selector ("[5m]",
// "[$__rate_interval]").
var rangeSelector = regexp.MustCompile(`\[([^\]]+)\]`)

// TestDashboard checks that the Grafana dashboard is valid JSON with panels
// that query Prometheus, that its provisioning points at it, that it has the
// template variables instance and product (queried from Prometheus, with
// All) and uses them, that every range is $__rate_interval (a fixed window
// shorter than four scrape intervals draws gaps), and that the sale row shows
// the sale series per product.
func TestDashboard(t *testing.T) {
	exprs := exprsOf(t, dashboardFile)
	if len(exprs) < 20 {
		t.Fatalf("dashboard has %d queries", len(exprs))
	}
	for _, e := range exprs {
		if strings.Count(e, "(") != strings.Count(e, ")") || !strings.Contains(e, "stampede_") && !metricName.MatchString(e) {
			t.Errorf("suspicious query %q", e)
		}
		for _, m := range rangeSelector.FindAllStringSubmatch(e, -1) {
			if m[1] != "$__rate_interval" {
				t.Errorf("query uses the fixed range [%s] instead of [$__rate_interval]: %s", m[1], e)
			}
		}
	}
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	dash := parseDashboard(t, raw)
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		if v.Type != "query" || v.Datasource.Type != "prometheus" || !strings.HasPrefix(v.Query.Query, "label_values(") || !v.IncludeAll {
			t.Errorf("template variable %s: want a Prometheus label_values query with All, got %+v", v.Name, v)
		}
		vars[v.Name] = true
	}
	for _, want := range []string{"instance", "product"} {
		if !vars[want] {
			t.Errorf("dashboard lacks the template variable %s", want)
		}
	}
	uses := map[string]int{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for v := range vars {
				if strings.Contains(tg.Expr, "$"+v) {
					uses[v]++
				}
			}
			if metricName.MatchString(tg.Expr) && !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q: query ignores $instance: %s", p.Title, tg.Expr)
			}
		}
	}
	if uses["product"] < 2 {
		t.Errorf("$product used by %d queries", uses["product"])
	}
	for _, series := range []string{"stampede_sale_units", "stampede_sale_orders", "stampede_refunds_pending", "stampede_refund_oldest_pending_seconds"} {
		found := false
		for _, e := range exprs {
			found = found || strings.Contains(e, series)
		}
		if !found {
			t.Errorf("no dashboard query shows %s", series)
		}
	}
	prov, err := os.ReadFile("../deploy/grafana/provisioning/dashboards/stampede.yml")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(prov, &p); err != nil || len(p.Providers) != 1 {
		t.Fatalf("provisioning: %v %+v", err, p)
	}
	compose, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(compose), "./deploy/grafana/dashboards:"+p.Providers[0].Options.Path) {
		t.Errorf("docker-compose.yml does not mount the dashboards at %s", p.Providers[0].Options.Path)
	}
}

func TestUnknownMetrics(t *testing.T) {
	names := map[string]bool{"stampede_a_seconds": true, "stampede_a_seconds_bucket": true, "stampede_b_total": true}
	for expr, want := range map[string]string{
		`histogram_quantile(0.99, sum by (le) (rate(stampede_a_seconds_bucket[5m])))`: "",
		`sum(rate(stampede_b_total{queue="stampede.order.created"}[1m])) > 0`:         "",
		`max(stampede_c) > 0 and stampede_b_total_count`:                              "stampede_b_total_count stampede_c",
	} {
		if got := strings.Join(unknownMetrics(expr, names), " "); got != want {
			t.Errorf("%s: unknown %q, want %q", expr, got, want)
		}
	}
}
