// Package pipelinetest gives tests an isolated RabbitMQ vhost and small
// polling helpers. Use it only from _test.go files.
package pipelinetest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
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

// Vhost returns the AMQP URL of vhost "stampede_test_<name>" on the test
// broker. The vhost is created with `rabbitmqctl add_vhost` and opened to the
// URL's user (`set_permissions … ".*" ".*" ".*"`) if the broker refuses a
// connection to it; then every queue of pipeline.Topology, the deployment
// marker (pipeline.QueueDeployment) and the events exchange are deleted in
// it, so the test starts from an empty topology owned by no deployment.
// Tests that share a name must not run in parallel.
func Vhost(t testing.TB, name string) string {
	t.Helper()
	vurl, err := EmptyVhost(name)
	if err != nil {
		t.Fatal(err)
	}
	return vurl
}

// EmptyVhost is Vhost for code without a testing.TB (an Example): it
// returns the error instead of failing a test.
func EmptyVhost(name string) (string, error) {
	vhost := "stampede_test_" + name
	u, err := url.Parse(BaseURL())
	if err != nil {
		return "", fmt.Errorf("pipelinetest: parse %s: %w", BaseURL(), err)
	}
	u.Path = "/" + vhost
	u.RawPath = "/" + url.PathEscape(vhost)
	vurl := u.String()

	conn, err := amqp.Dial(vurl)
	if err != nil {
		user := "guest"
		if u.User != nil {
			user = u.User.Username()
		}
		if err := rabbitmqctl("add_vhost", vhost); err != nil {
			return "", err
		}
		if err := rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*"); err != nil {
			return "", err
		}
		if conn, err = amqp.Dial(vurl); err != nil {
			return "", fmt.Errorf("pipelinetest: dial vhost %s: %w (is RabbitMQ running? try `make services`)", vhost, err)
		}
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return "", fmt.Errorf("pipelinetest: channel on %s: %w", vhost, err)
	}
	defer ch.Close()
	for _, q := range append(pipeline.Topology(), pipeline.QueueSpec{Name: pipeline.QueueDeployment}) {
		if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
			return "", fmt.Errorf("pipelinetest: delete queue %s in %s: %w", q.Name, vhost, err)
		}
	}
	if err := ch.ExchangeDelete(order.EventsExchange, false, false); err != nil {
		return "", fmt.Errorf("pipelinetest: delete exchange in %s: %w", vhost, err)
	}
	return vurl, nil
}

func rabbitmqctl(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "already exists") {
		var ee *exec.Error
		if errors.As(err, &ee) {
			return fmt.Errorf("pipelinetest: rabbitmqctl not found (%w); it is needed to create test vhosts", err)
		}
		return fmt.Errorf("pipelinetest: rabbitmqctl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
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
// test vhost name (Vhost) whose names match pattern, and removes it when the
// test ends. The broker applies it to existing queues at once.
func Policy(t testing.TB, vhostName, name, pattern, definition string) (clear func()) {
	t.Helper()
	vhost := "stampede_test_" + vhostName
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
