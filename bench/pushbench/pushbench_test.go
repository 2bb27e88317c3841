package pushbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
	"github.com/stampede-sh/stampede/push"
)

// testAMQPURL returns the URL of the test's own RabbitMQ vhost on the test
// broker (pipelinetest.Vhost: STAMPEDE_TEST_AMQP_URL).
func testAMQPURL(t *testing.T) string {
	t.Helper()
	return pipelinetest.Vhost(t, "pushbench")
}

type noSnapshots struct{}

func (noSnapshots) OrderSnapshot(context.Context, int64, string) (push.Snapshot, error) {
	return push.Snapshot{}, push.ErrNotFound
}
func (noSnapshots) RecentOrders(context.Context, int64, int) ([]push.Snapshot, error) {
	return nil, nil
}

func TestRunDeliversEveryEventOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	url := testAMQPURL(t)
	exchange := fmt.Sprintf("test.pushbench.%d", time.Now().UnixNano())
	const secret = "pushbench-test-secret"
	hub, err := push.New(push.Config{Exchange: exchange}, auth.NewVerifier([]byte(secret)), noSnapshots{}, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hubCtx, stopHub := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- hub.Serve(hubCtx, ln) }()
	defer func() {
		stopHub()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	for hub.Ready(ctx) != nil {
		if ctx.Err() != nil {
			t.Fatal("hub never started consuming")
		}
		time.Sleep(10 * time.Millisecond)
	}

	res, err := Run(ctx, Config{
		PushURL: "ws://" + ln.Addr().String() + "/ws", AMQPURL: url, Exchange: exchange, JWTSecret: secret,
		Subscribers: 50, Events: 200, Rate: 1000, PushPID: os.Getpid(), Drain: 5 * time.Second, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", res)
	if res.Subscribers != 50 || res.Expected != 200 {
		t.Fatalf("ran %d subscribers, %d events; want 50, 200", res.Subscribers, res.Expected)
	}
	if res.Delivered != res.Expected || res.Duplicates != 0 || res.Misrouted != 0 || res.Dropped != 0 {
		t.Fatalf("delivered %d/%d, %d duplicates, %d misrouted, %d dropped; want every event exactly once to its user",
			res.Delivered, res.Expected, res.Duplicates, res.Misrouted, res.Dropped)
	}
	if res.P50Ms <= 0 || res.MaxMs < res.P99Ms || res.P99Ms < res.P50Ms {
		t.Fatalf("implausible latencies: %+v", res)
	}
	if res.RSSBeforeKB <= 0 || res.RSSConnectedKB <= 0 {
		t.Fatalf("RSS not measured: %+v", res)
	}
	if st := hub.Stats(); st.EventsReceived != 200 {
		t.Fatalf("hub received %d events, want 200", st.EventsReceived)
	}
}

func TestFdBudgetReducesSubscribers(t *testing.T) {
	n, note, err := fdBudget(1<<30, true)
	if err != nil {
		t.Fatal(err)
	}
	if n >= 1<<29 || note == "" {
		t.Fatalf("fdBudget(2^30) = %d, %q; want a reduction with a note", n, note)
	}
	if n, note, _ := fdBudget(10, false); n != 10 || note != "" {
		t.Fatalf("fdBudget(10) = %d, %q", n, note)
	}
}
