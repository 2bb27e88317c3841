package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
	"github.com/stampede-sh/stampede/systest/ports"
)

// otherDeployment is serviceArgs with the MySQL database of another
// deployment (the test's database "cmd_other") on the same Redis DB, a
// RabbitMQ vhost of its own (label "cmd_other": a vhost serves one
// deployment, TestSecondDeploymentOnVhostRefused), and new HTTP and push
// addresses.
func otherDeployment(t *testing.T, ours []string) []string {
	t.Helper()
	persistencetest.New(t, "cmd_other")
	out := append([]string(nil), ours...)
	for i := 0; i+1 < len(out); i++ {
		switch out[i] {
		case "--mysql-dsn":
			out[i+1] = persistencetest.DSNFor(t, "cmd_other") + "?parseTime=true"
		case "--http-addr", "--push-addr":
			out[i+1] = ports.Addr(t)
		case "--amqp-url":
			out[i+1] = pipelinetest.Vhost(t, "cmd_other")
		}
	}
	return out
}

// flagValue is the value following name in args.
func flagValue(args []string, name string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return ""
}

// serving is a `stampede serve` run in this process.
type serving struct {
	cancel context.CancelFunc
	done   chan error
	err    error
	exited bool
}

// serveUntil runs `stampede serve --roles roles` with args until stop.
func serveUntil(roles string, args []string) *serving {
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- run(ctx, append([]string{"serve", "--roles", roles}, args...), io.Discard) }()
	return s
}

// ready waits until base answers /readyz 200, failing t if the run ended.
func (s *serving) ready(t *testing.T, base string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case s.err = <-s.done:
			s.exited = true
			t.Fatalf("serve ended before it was ready: %v", s.err)
		default:
		}
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
	}
	t.Fatalf("%s not ready within a minute", base)
}

// stop cancels the run and waits for it.
// ctxErr is the run's error if it ended already, else nil.
func (s *serving) ctxErr() error {
	select {
	case s.err = <-s.done:
		s.exited = true
		if s.err == nil {
			return errors.New("serve ended")
		}
		return s.err
	default:
		return nil
	}
}

func (s *serving) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	if !s.exited {
		s.err, s.exited = <-s.done, true
		if s.err != nil && !errors.Is(s.err, context.Canceled) {
			t.Errorf("serve: %v", s.err)
		}
	}
}

func postJSON(t *testing.T, url, token string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// sellTheirs runs the other deployment's gateway on the shared Redis DB:
// it creates product 1 and accepts one order that no writer stores. It
// returns the identity it claimed the Redis DB with.
func sellTheirs(t *testing.T, rdb *redis.Client, theirs []string, admin string) string {
	t.Helper()
	srv := serveUntil("gateway", theirs)
	defer srv.stop(t)
	base := "http://" + flagValue(theirs, "--http-addr")
	srv.ready(t, base)
	now := time.Now().UTC()
	st, p := postJSON(t, base+"/api/admin/products", admin, map[string]any{"name": "Theirs", "price": 100, "stock": 10,
		"saleStart": now.Add(-time.Minute).Format(time.RFC3339), "saleEnd": now.Add(time.Hour).Format(time.RFC3339)})
	if st != 201 {
		t.Fatalf("their product: %d %v", st, p)
	}
	buyer, _ := auth.Issue([]byte(deploymentTestSecret), 77, false, time.Hour)
	if st, o := postJSON(t, base+"/api/orders", buyer, map[string]any{"productId": p["id"], "quantity": 1, "requestId": "theirs-1"}); st != 202 {
		t.Fatalf("their order: %d %v", st, o)
	}
	id, err := rdb.Get(context.Background(), lua.DeploymentKey).Result()
	if err != nil {
		t.Fatalf("their identity: %v", err)
	}
	return id
}

const deploymentTestSecret = "deployment-test-secret-0123456789abcdef"

// TestWrongRedisDBRefused is finding 1 of issue 27 end to end: a Redis DB
// that holds another database's stock (and one of its reservations not
// yet written) makes every role of this deployment refuse to start with a
// message naming both identities and the two ways out, `stampede demo
// --once` fail with it (it panicked, after selling the other database's
// stock as its own), and `stampede redis-takeover` refuse while the
// reservation is live and hand the Redis DB over once the other
// deployment's writer stored it. Before identities every role started and
// the demo's product 1 took over the other product 1's hash.
func TestWrongRedisDBRefused(t *testing.T) {
	t.Parallel() // the test's own databases, vhost and ports
	if testing.Short() {
		t.Skip("starts the roles")
	}
	ours := append(serviceArgs(t), "--jwt-secret", deploymentTestSecret)
	theirs := otherDeployment(t, ours)
	admin, err := auth.Issue([]byte(deploymentTestSecret), 1, true, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rdb := luatest.New(t, luatest.DBCmd)
	ctx := context.Background()

	theirID := sellTheirs(t, rdb, theirs, admin)

	// Every role of ours refuses, naming both identities and the ways out.
	for _, role := range allRoles {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := run(rctx, append([]string{"serve", "--roles", role}, ours...), io.Discard)
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errWrongDeployment) {
			t.Fatalf("serve --roles %s on their Redis DB: %v, want a refusal", role, err)
		}
		for _, want := range []string{theirID, "STAMPEDE_REDIS_DB", "stampede redis-takeover", persistencetest.NameFor(t, "cmd") + " at"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal of %s lacks %q: %v", role, want, err)
			}
		}
		if role == "gateway" {
			t.Logf("refusal: %v", err)
		}
	}
	if v, _ := rdb.Get(ctx, lua.DeploymentKey).Result(); v != theirID {
		t.Fatalf("a refused start changed the identity to %q", v)
	}

	// The demo fails with the same message and exit status, no panic.
	var out bytes.Buffer
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = run(dctx, append([]string{"demo", "--once", "--buyers", "20", "--replays", "0", "--stock", "5"}, ours...), &out)
	cancel()
	if !errors.Is(err, errWrongDeployment) || !strings.Contains(err.Error(), theirID) {
		t.Fatalf("demo --once on their Redis DB: %v\n%s", err, out.String())
	}
	demoProcessRefused(t, ours, theirID)

	checkTakeover(t, rdb, ours, theirs, theirID)
	// Ours starts now and sells its own product 1.
	mine := serveUntil("gateway", ours)
	defer mine.stop(t)
	base := "http://" + flagValue(ours, "--http-addr")
	mine.ready(t, base)
	now := time.Now().UTC()
	st, p := postJSON(t, base+"/api/admin/products", admin, map[string]any{"name": "Ours", "price": 100, "stock": 3,
		"saleStart": now.Add(-time.Minute).Format(time.RFC3339), "saleEnd": now.Add(time.Hour).Format(time.RFC3339)})
	if st != 201 || fmt.Sprint(p["available"]) != "3" {
		t.Fatalf("our product after the takeover: %d %v", st, p)
	}
}

// demoProcessRefused runs `stampede demo --once` on their Redis DB as a
// real process (the binary built from this package): it must exit with
// status 1 and print the refusal (both identities' sources, the ways out)
// on stderr, and nothing of a panic.
func demoProcessRefused(t *testing.T, ours []string, theirID string) {
	t.Helper()
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"demo", "--once", "--buyers", "20", "--replays", "0", "--stock", "5"}, ours...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("stampede demo --once on their Redis DB: %v, want exit status 1\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	msg := stderr.String()
	for _, want := range []string{"stampede: " + errWrongDeployment.Error(), theirID, "STAMPEDE_REDIS_DB", "stampede redis-takeover", persistencetest.NameFor(t, "cmd") + " at"} {
		if !strings.Contains(msg, want) {
			t.Errorf("demo's stderr lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "panic:") {
		t.Errorf("demo panicked:\n%s", msg)
	}
	t.Logf("stampede demo --once as a process: exit status 1, stderr %q…", msg[:min(len(msg), 120)])
}

// checkTakeover: `stampede redis-takeover` refuses while their reservation
// is live (nothing changed) and hands the Redis DB over once their writer
// stored it, their product's stock gone.
func checkTakeover(t *testing.T, rdb *redis.Client, ours, theirs []string, theirID string) {
	t.Helper()
	ctx := context.Background()
	var out bytes.Buffer
	// The takeover refuses while their reservation is live…
	err := run(ctx, append([]string{"redis-takeover"}, ours...), &out)
	if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "1 intake entries") {
		t.Fatalf("takeover with a live reservation: %v %s", err, out.String())
	}
	if v, _ := rdb.Get(ctx, lua.DeploymentKey).Result(); v != theirID {
		t.Fatalf("a refused takeover changed the identity to %q", v)
	}
	// …and succeeds once their writer stored it.
	writer := serveUntil("writer", theirs)
	defer writer.stop(t)
	for deadline := time.Now().Add(time.Minute); ; {
		live, err := lua.LiveReservations(ctx, rdb)
		if err == nil && !live.Any() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("their writer did not store the reservation: %+v %v", live, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	writer.stop(t)
	out.Reset()
	if err := run(ctx, append([]string{"redis-takeover"}, ours...), &out); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	t.Log(strings.TrimSpace(out.String()))
	if n, _ := rdb.Exists(ctx, lua.ShardKeys(1, 0).Stock()).Result(); n != 0 {
		t.Fatal("their product's stock survived the takeover")
	}
}

// TestTakeoverReloadsRooms: after a Redis loss (the Redis DB emptied, as a
// restart without persistence leaves it), `stampede redis-takeover` loads
// this database's products again with the waiting room each had on — its
// mode, ceiling, window and published commitment — so a drop does not
// reopen to whoever orders first: an order without a ticket is refused
// NOT_ADMITTED, and a ticket is given again. Before, the products came
// back with their rooms off and every buyer ordered directly.
func TestTakeoverReloadsRooms(t *testing.T) {
	t.Parallel() // the test's own databases, vhost and ports
	if testing.Short() {
		t.Skip("starts the roles")
	}
	ours := append(serviceArgs(t), "--jwt-secret", deploymentTestSecret)
	admin, err := auth.Issue([]byte(deploymentTestSecret), 1, true, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	buyer, _ := auth.Issue([]byte(deploymentTestSecret), 501, false, time.Hour)
	rdb := luatest.New(t, luatest.DBCmd)
	ctx := context.Background()
	base := "http://" + flagValue(ours, "--http-addr")

	gw := serveUntil("gateway", ours)
	gw.ready(t, base)
	now := time.Now().UTC()
	st, p := postJSON(t, base+"/api/admin/products", admin, map[string]any{"name": "Drop", "price": 100, "stock": 5,
		"maxPerOrder": 1, "saleStart": now.Add(-time.Minute).Format(time.RFC3339), "saleEnd": now.Add(time.Hour).Format(time.RFC3339)})
	if st != 201 {
		t.Fatalf("product: %d %v", st, p)
	}
	pid := int64(p["id"].(float64))
	st, terms := postJSON(t, fmt.Sprintf("%s/api/admin/products/%d/waiting-room", base, pid), admin,
		map[string]any{"on": true, "mode": "random", "ceiling": 7, "windowSeconds": 90})
	if st != 200 {
		t.Fatalf("waiting room: %d %v", st, terms)
	}
	gw.stop(t)

	if err := luatest.Flush(ctx, rdb); err != nil { // the Redis loss (FLUSHDB; the test keeps its claim)
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(ctx, append([]string{"redis-takeover"}, ours...), &out); err != nil {
		t.Fatalf("takeover: %v %s", err, out.String())
	}
	t.Log(strings.TrimSpace(out.String()))
	room, err := lua.ReadRoom(ctx, rdb, pid)
	if err != nil {
		t.Fatal(err)
	}
	if !room.On {
		t.Fatalf("product %d's waiting room after the reload: off (%+v), want on", pid, room)
	}
	state, _ := rdb.HGetAll(ctx, lua.Room(pid).State()).Result()
	if state["mode"] != "random" || state["commit"] != terms["commitment"] {
		t.Errorf("room state after the reload: %v, want mode random and commitment %v", state, terms["commitment"])
	}

	gw = serveUntil("gateway", ours)
	defer gw.stop(t)
	gw.ready(t, base)
	if st, o := postJSON(t, base+"/api/orders", buyer, map[string]any{"productId": pid, "quantity": 1, "requestId": "no-ticket"}); st != 409 || errorCode(o) != "NOT_ADMITTED" {
		t.Fatalf("an order without a ticket after the reload: %d %v, want 409 NOT_ADMITTED", st, o)
	}
	if st, q := postJSON(t, fmt.Sprintf("%s/api/products/%d/queue", base, pid), buyer, map[string]any{}); st != 200 || q["state"] != "WAITING" {
		t.Fatalf("a ticket after the reload: %d %v, want 200 WAITING", st, q)
	}
}

// errorCode is the code of an error answer ({"error": {"code": …}}), "" if none.
func errorCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// TestSecondDeploymentOnVhostRefused: two deployments (two MySQL databases,
// two Redis servers) configured with one RabbitMQ vhost. The first to start
// a role that uses RabbitMQ claims the vhost (its marker queue carries the
// identity); every RabbitMQ role of the other — gateway, relay, consumer,
// push — refuses to start, naming both identities and the ways out, and
// changes nothing. Once the first is gone and its marker deleted, the other
// starts. Before, both started and consumed each other's release events.
func TestSecondDeploymentOnVhostRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the roles")
	}
	ours := append(serviceArgs(t), "--jwt-secret", deploymentTestSecret)
	theirs := otherDeployment(t, ours)
	theirRedis := luatest.Private(t)
	for i := 0; i+1 < len(theirs); i++ {
		switch theirs[i] {
		case "--amqp-url":
			theirs[i+1] = flagValue(ours, "--amqp-url") // the same vhost
		case "--redis-addr":
			theirs[i+1] = theirRedis.Options().Addr
		case "--redis-db":
			theirs[i+1] = "0"
		}
	}
	ctx := context.Background()
	theirStore, err := persistence.Open(ctx, persistencetest.DSNFor(t, "cmd_other"))
	if err != nil {
		t.Fatal(err)
	}
	defer theirStore.Close()
	theirID, err := theirStore.DeploymentID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveUntil("gateway", theirs)
	srv.ready(t, "http://"+flagValue(theirs, "--http-addr"))

	for _, role := range []string{"gateway", "relay", "consumer", "push"} {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := run(rctx, append([]string{"serve", "--roles", role}, ours...), io.Discard)
		cancel()
		if !errors.Is(err, errWrongVhost) {
			t.Fatalf("serve --roles %s on their vhost: %v, want a refusal", role, err)
		}
		vhost, db := pipelinetest.VhostName(t, "cmd"), persistencetest.NameFor(t, "cmd")
		for _, want := range []string{theirID, db + " at", "STAMPEDE_AMQP_URL", "rabbitmqctl delete_queue -p " + vhost + " stampede.deployment"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal of %s lacks %q: %v", role, want, err)
			}
		}
		if role == "relay" {
			t.Logf("refusal: %v", err)
		}
	}
	// Theirs is untouched: it declares its topology again as the owner.
	if err := srv.ctxErr(); err != nil {
		t.Fatalf("their gateway stopped: %v", err)
	}
	srv.stop(t)
	// Handed over: their marker deleted, ours claims the vhost and starts.
	ch := pipelinetest.Channel(t, flagValue(ours, "--amqp-url"))
	if _, err := ch.QueueDelete(pipeline.QueueDeployment, false, false, false); err != nil {
		t.Fatal(err)
	}
	mine := serveUntil("gateway", ours)
	defer mine.stop(t)
	mine.ready(t, "http://"+flagValue(ours, "--http-addr"))
}
