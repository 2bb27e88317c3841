package pushbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// lineClientEnv makes this test binary a client process of RunLine
// (TestMain); its value is the JSON LineClientConfig.
const lineClientEnv = "STAMPEDE_TEST_PUSHBENCH_LINE_CLIENT"

func TestMain(m *testing.M) {
	if arg := os.Getenv(lineClientEnv); arg != "" {
		if err := RunLineClient(context.Background(), arg, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A small run over two client processes and two source addresses: every
// socket follows the line, every move reaches every socket with its place,
// and the hub's memory is measured.
func TestRunLineReachesEverySocket(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := RunLine(ctx, LineConfig{
		JWTSecret: "pushbench-line-test-secret", Sockets: 300, Updates: 3, Step: 10, Interval: 300 * time.Millisecond,
		PerClient: 150, Sources: 2, Drain: 20 * time.Second, Logf: t.Logf,
		ClientCommand: func(arg string) *exec.Cmd {
			c := exec.Command(self, "-test.run=^$")
			c.Env = append(os.Environ(), lineClientEnv+"="+arg)
			return c
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", res)
	if res.Sockets != 300 || res.Failed != 0 || res.Clients != 2 || res.Sources != 2 {
		t.Fatalf("held %d sockets (%d failed) over %d processes and %d addresses; want 300 (0) over 2 and 2", res.Sockets, res.Failed, res.Clients, res.Sources)
	}
	if len(res.Moves) != 3 || res.Reached != 900 || res.Expected != 900 || res.Wrong != 0 {
		t.Fatalf("%d moves reached %d/%d socket places, %d wrong; want 3 moves, 900/900, 0", len(res.Moves), res.Reached, res.Expected, res.Wrong)
	}
	for i, m := range res.Moves {
		if m.UpTo != int64(10*(i+1)) || m.Reached != 300 || m.MaxMs < m.P50Ms || m.P50Ms <= 0 {
			t.Fatalf("move %d: %+v", i+1, m)
		}
	}
	if res.HeapConnectedKB <= res.HeapBeforeKB || res.RSSConnectedKB <= 0 {
		t.Fatalf("memory not measured: heap %.0f → %.0f KB, RSS %d KB", res.HeapBeforeKB, res.HeapConnectedKB, res.RSSConnectedKB)
	}
	// A socket holds one parked goroutine (its reader). The count before
	// the connects may still hold a few goroutines of the hub's start that
	// end by the second count (seen once in CI under a loaded -race run:
	// the check then failed with every socket connected), so a few may
	// be missing, not a tenth.
	if grown := res.Goroutines1 - res.Goroutines0; grown < 300-30 {
		t.Fatalf("goroutines %d → %d: %d more for 300 sockets, want about one each", res.Goroutines0, res.Goroutines1, grown)
	}
	if res.ScaleTargetMet {
		t.Fatal("300 sockets met the 100,000-socket target")
	}
}

func TestParseQueue(t *testing.T) {
	for _, c := range []struct {
		in   string
		want wireQueue
		ok   bool
	}{
		{`{"type":"queue","productId":28,"mode":"fifo","ticket":"0000000000001389","state":"WAITING","position":4001,"etaSeconds":5,"seq":2}`,
			wireQueue{Type: "queue", Ticket: 5001, State: "WAITING", Position: 4001, Seq: 2}, true},
		{`{"type":"queue","productId":28,"mode":"fifo","ticket":"0000000000000007","state":"ADMITTED","position":0,"etaSeconds":0,"seq":19}`,
			wireQueue{Type: "queue", Ticket: 7, State: "ADMITTED", Position: 0, Seq: 19}, true},
		{`{"type":"queue","seq":3,"state":"SOLD_OUT","position":1,"ticket":"0000000000000009"}`, // any order
			wireQueue{Type: "queue", Ticket: 9, State: "SOLD_OUT", Position: 1, Seq: 3}, true},
		{`{"type":"queue", "ticket": "0000000000000009", "state": "WAITING", "position": 1, "seq": 3}`, // spaces: encoding/json
			wireQueue{Type: "queue", TicketID: "0000000000000009", Ticket: 9, State: "WAITING", Position: 1, Seq: 3}, true},
		{`{"type":"pong"}`, wireQueue{}, false},
		{`{"type":"product","productId":28,"available":3,"soldOut":false}`, wireQueue{}, false},
	} {
		got, ok := parseQueue([]byte(c.in))
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("parseQueue(%s) = %+v, %v; want %+v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// The client flags every kind of wrong place and only those.
func TestLineSocketFlagsWrongPlaces(t *testing.T) {
	q := func(ticket int64, state string, pos int64, seq uint64) wireQueue {
		return wireQueue{Type: "queue", Ticket: ticket, State: state, Position: pos, Seq: seq}
	}
	for _, c := range []struct {
		name  string
		next  wireQueue
		wrong bool
	}{
		{"moves forward", q(100, "WAITING", 80, 2), false},
		{"someone else's ticket", q(101, "WAITING", 80, 2), true},
		{"not waiting", q(100, "ADMITTED", 0, 2), true},
		{"old seq", q(100, "WAITING", 80, 1), true},
		{"same place", q(100, "WAITING", 90, 2), true},
		{"backwards", q(100, "WAITING", 95, 2), true},
	} {
		s := &lineSocket{ticket: 100}
		s.record(q(100, "WAITING", 90, 1), 1)
		if s.wrong.Load() {
			t.Fatalf("%s: first place flagged", c.name)
		}
		s.record(c.next, 2)
		if s.wrong.Load() != c.wrong {
			t.Errorf("%s: flagged %v, want %v", c.name, s.wrong.Load(), c.wrong)
		}
		if s.place() != c.next.Position || s.at.Load() != 2 {
			t.Errorf("%s: place %d at %d not recorded", c.name, s.place(), s.at.Load())
		}
	}
}
