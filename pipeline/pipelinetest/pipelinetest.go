// Package pipelinetest gives tests a RabbitMQ vhost of their own and small
// polling helpers. A test's vhost is one this package created
// ("stampede_test_<label>_<UTC yymmddhhmm><6 random hex digits>"), never one it did not
// create: on the broker of the run's own (STAMPEDE_TEST_OWNED) vhosts are
// pooled within a test process and emptied between tests; on any other
// broker each is deleted when its test ends. Use it only from _test.go
// files.
package pipelinetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

// BaseURL is the test broker with the default vhost, from
// STAMPEDE_TEST_AMQP_URL or amqp://guest:guest@127.0.0.1:5672/.
func BaseURL() string {
	if u := os.Getenv("STAMPEDE_TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// Owned reports whether the broker at addr (host:port) belongs to this run
// (listed in STAMPEDE_TEST_OWNED, which scripts/testservices.sh writes).
func Owned(addr string) bool {
	return addr != "" && slices.Contains(strings.Split(os.Getenv("STAMPEDE_TEST_OWNED"), ","), addr)
}

// VhostLease is the age after which a vhost of this package's naming on a
// broker not the run's own counts as left behind (its run was killed before
// its cleanup) and is deleted by the next run.
const VhostLease = 3 * time.Hour

// vhostRE matches the vhosts this package creates: label, creation time
// (UTC, to the second), random suffix.
var vhostRE = regexp.MustCompile(`^stampede_test_[a-z0-9_]*_(\d{10})[0-9a-f]{6}$`)

var vhostPool struct {
	mu    sync.Mutex
	idle  []*TestVhost
	swept bool // vhosts left behind by killed runs deleted (not owned)
}

// TestVhost is a vhost of the test broker created by this package
// ("stampede_test_<label>_<UTC yymmddhhmm><6 random hex digits>") for one user at a time.
type TestVhost struct {
	Name  string
	URL   string // the broker URL with this vhost
	owned bool   // the broker is the run's own: pool it
}

// AcquireVhost returns a vhost of the caller's own on the test broker
// (label names it), with an empty topology (Empty): an idle one of the
// pool, or a new one, created with `rabbitmqctl import_definitions` and
// opened to the URL's user. The caller calls Release when done. On a broker
// that is not the run's own, vhosts of this naming older than VhostLease are
// deleted first (once a process); no other vhost is ever touched.
func AcquireVhost(label string) (*TestVhost, error) {
	u, err := url.Parse(BaseURL())
	if err != nil {
		return nil, fmt.Errorf("pipelinetest: parse %s: %w", BaseURL(), err)
	}
	owned := Owned(u.Host)
	vhostPool.mu.Lock()
	if owned && len(vhostPool.idle) > 0 {
		v := vhostPool.idle[len(vhostPool.idle)-1]
		vhostPool.idle = vhostPool.idle[:len(vhostPool.idle)-1]
		vhostPool.mu.Unlock()
		return v, nil
	}
	sweep := !owned && !vhostPool.swept
	vhostPool.swept = true
	vhostPool.mu.Unlock()
	if sweep {
		if err := sweepVhosts(time.Now()); err != nil {
			return nil, err
		}
	}

	name := newVhostName(label)
	u.Path = "/" + name
	u.RawPath = "/" + url.PathEscape(name)
	user := "guest"
	if u.User != nil {
		user = u.User.Username()
	}
	defs, err := json.Marshal(map[string]any{
		"vhosts":      []map[string]string{{"name": name}},
		"permissions": []map[string]string{{"user": user, "vhost": name, "configure": ".*", "write": ".*", "read": ".*"}},
	})
	if err != nil {
		return nil, err
	}
	if err := rabbitmqctlIn(defs, "import_definitions"); err != nil {
		return nil, err
	}
	v := &TestVhost{Name: name, URL: u.String(), owned: owned}
	conn, err := amqp.Dial(v.URL)
	if err != nil {
		_ = rabbitmqctl("delete_vhost", name)
		return nil, fmt.Errorf("pipelinetest: dial vhost %s: %w (is RabbitMQ running? `make test` starts servers of its own; scripts/testservices.sh)", name, err)
	}
	conn.Close()
	return v, nil
}

// Empty deletes every queue of pipeline.Topology, the deployment marker
// (pipeline.QueueDeployment) and the events exchange in v, so its next user
// starts from an empty topology owned by no deployment.
func (v *TestVhost) Empty() error {
	conn, err := amqp.Dial(v.URL)
	if err != nil {
		return fmt.Errorf("pipelinetest: dial vhost %s: %w", v.Name, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("pipelinetest: channel on %s: %w", v.Name, err)
	}
	defer ch.Close()
	for _, q := range append(pipeline.Topology(), pipeline.QueueSpec{Name: pipeline.QueueDeployment}) {
		if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
			return fmt.Errorf("pipelinetest: delete queue %s in %s: %w", q.Name, v.Name, err)
		}
	}
	if err := ch.ExchangeDelete(order.EventsExchange, false, false); err != nil {
		return fmt.Errorf("pipelinetest: delete exchange in %s: %w", v.Name, err)
	}
	return nil
}

// Release gives v back: on the run's own broker emptied and pooled, on any
// other broker deleted.
func (v *TestVhost) Release() error {
	if !v.owned {
		return rabbitmqctl("delete_vhost", v.Name)
	}
	if err := v.Empty(); err != nil {
		return err
	}
	vhostPool.mu.Lock()
	vhostPool.idle = append(vhostPool.idle, v)
	vhostPool.mu.Unlock()
	return nil
}

// vhostTime is the layout of the creation time in a vhost name (UTC, to the
// minute), as persistencetest's database names.
const vhostTime = "0601021504"

// newVhostName is a fresh vhost name for label.
func newVhostName(label string) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '_'
	}, label)
	if len(clean) > 24 {
		clean = clean[:24]
	}
	return fmt.Sprintf("stampede_test_%s_%s%06x", clean, time.Now().UTC().Format(vhostTime), rand.Uint32()&0xffffff)
}

// sweepVhosts deletes the vhosts of this package's naming created more than
// VhostLease before now.
func sweepVhosts(now time.Time) error {
	out, err := rabbitmqctlOut("-q", "list_vhosts", "name")
	if err != nil {
		return err
	}
	for _, name := range strings.Fields(out) {
		m := vhostRE.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		if at, err := time.Parse(vhostTime, m[1]); err == nil && now.Sub(at) > VhostLease {
			if err := rabbitmqctl("delete_vhost", name); err != nil {
				return err
			}
		}
	}
	return nil
}

var (
	testsMu sync.Mutex
	tests   = map[testing.TB]map[string]*TestVhost{}
)

// Vhost returns the AMQP URL of the test's vhost of label (calls with the
// same label in one test share a vhost), with an empty topology
// (TestVhost.Empty); the vhost is given back when the test ends
// (TestVhost.Release). Tests of any label may run in parallel.
func Vhost(t testing.TB, label string) string {
	t.Helper()
	testsMu.Lock()
	v := tests[t][label]
	testsMu.Unlock()
	if v != nil {
		if err := v.Empty(); err != nil {
			t.Fatal(err)
		}
		return v.URL
	}
	v, err := AcquireVhost(label)
	if err != nil {
		t.Fatal(err)
	}
	testsMu.Lock()
	if tests[t] == nil {
		tests[t] = map[string]*TestVhost{}
		t.Cleanup(func() { releaseVhosts(t) })
	}
	tests[t][label] = v
	testsMu.Unlock()
	return v.URL
}

// VhostName is the name of test t's vhost of label (Vhost(t, label) first).
func VhostName(t testing.TB, label string) string {
	t.Helper()
	testsMu.Lock()
	v := tests[t][label]
	testsMu.Unlock()
	if v == nil {
		t.Fatalf("pipelinetest: test has no vhost %q: call Vhost(t, %q) first", label, label)
	}
	return v.Name
}

// releaseVhosts gives back every vhost of test t.
func releaseVhosts(t testing.TB) {
	testsMu.Lock()
	vs := tests[t]
	delete(tests, t)
	testsMu.Unlock()
	for _, v := range vs {
		if err := v.Release(); err != nil {
			t.Error(err)
		}
	}
}

// rabbitmqctl runs rabbitmqctl with args (on RABBITMQ_NODENAME's node when
// set, as the tool reads it).
func rabbitmqctl(args ...string) error {
	_, err := rabbitmqctlOut(args...)
	return err
}

func rabbitmqctlOut(args ...string) (string, error) { return ctl(nil, args...) }

// rabbitmqctlIn runs rabbitmqctl with stdin.
func rabbitmqctlIn(stdin []byte, args ...string) error {
	_, err := ctl(stdin, args...)
	return err
}

// ctlTimeout bounds one rabbitmqctl call: it boots an Erlang node each time,
// and with two test runs and other work on 2 cores (load 34) a vhost's
// import_definitions took longer than a minute.
const ctlTimeout = 3 * time.Minute

func ctl(stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ctlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "rabbitmqctl", args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			return "", fmt.Errorf("pipelinetest: rabbitmqctl not found (%w); it is needed to create test vhosts", err)
		}
		return "", fmt.Errorf("pipelinetest: rabbitmqctl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// WaitFor polls cond every 10ms until it returns true, failing the test
// with msg (and the last value of cond's detail) after timeout.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var detail string
	for {
		var ok bool
		if ok, detail = cond(); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pipelinetest: timed out after %v waiting for %s: %s", timeout, msg, detail)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// QueueDepth returns the number of ready messages in queue on the broker at
// amqpURL.
func QueueDepth(t testing.TB, amqpURL, queue string) int {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatalf("pipelinetest: dial: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("pipelinetest: channel: %v", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("pipelinetest: inspect %s: %v", queue, err)
	}
	return q.Messages
}

// Channel opens a connection and a channel to url for the test, failing it
// on error; both close when the test ends.
func Channel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("pipelinetest: dial %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("pipelinetest: channel: %v", err)
	}
	t.Cleanup(func() { ch.Close() })
	return ch
}

// Metric is the value of series name in g summed over the series whose
// labels include every name/value pair of labels: a counter's or a gauge's
// value, a histogram's sample count. It is 0 when no series matches.
func Metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("pipelinetest: gather: %v", err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() == name {
			sum += SumSeries(f, labels...)
		}
	}
	return sum
}

// SumSeries sums the series of f whose labels include every name/value pair
// of labels: a counter's or gauge's value, a histogram's sample count, an
// untyped value (families parsed from a text exposition).
func SumSeries(f *dto.MetricFamily, labels ...string) float64 {
	var sum float64
series:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

// Policy sets RabbitMQ policy name (definition: its JSON, e.g.
// `{"max-length":0,"overflow":"reject-publish"}`) on the queues of the
// test's vhost of label vhostLabel (Vhost(t, vhostLabel) first) whose names
// match pattern, and removes it when the test ends. The broker applies it to
// existing queues at once.
func Policy(t testing.TB, vhostLabel, name, pattern, definition string) (clear func()) {
	t.Helper()
	vhost := VhostName(t, vhostLabel)
	if err := rabbitmqctl("set_policy", "-p", vhost, "--apply-to", "queues", name, pattern, definition); err != nil {
		t.Fatal(err)
	}
	cleared := false
	clear = func() {
		if !cleared {
			cleared = true
			if err := rabbitmqctl("clear_policy", "-p", vhost, name); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(clear)
	return clear
}
