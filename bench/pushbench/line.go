package pushbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/push"
)

// The waiting room at sale-day scale (issue 28): RunLine serves a push hub
// in this process — the push process of the run — and has client processes
// (RunLineClient, started through LineConfig.ClientCommand) open Sockets
// WebSockets to it, one user each, every one following one product's line
// ({"type":"queue"}). It then moves the line Updates times (Hub.PublishLine,
// as the line feed of `serve --roles push` does) and measures, for each
// move, the time from the call to each socket's receipt of its new place,
// and the hub's memory per socket: Go heap and stacks after a GC
// (runtime.MemStats) and VmRSS, each as the difference to before the
// sockets, divided by the sockets held.

// Targets of issue 28.
const (
	TargetLineSockets     = 100_000
	TargetLineKBPerSocket = 20.0
	TargetLineFanout      = 2 * time.Second
)

// LineConfig configures RunLine. Zero values take the defaults in brackets.
type LineConfig struct {
	JWTSecret string         // key of the clients' tokens
	Verifier  *auth.Verifier // the hub's [auth.NewVerifier(JWTSecret)]

	Sockets   int           // sockets, one user each [100000]; fewer if this process's fd limit is lower
	Updates   int           // moves of the line [5]
	Step      int64         // tickets admitted per move [1000]
	Interval  time.Duration // between two moves [3s]; above the hub's ProductThrottle
	PerClient int           // sockets per client process [10000]
	Sources   int           // loopback source addresses 127.0.0.2… the clients bind to [one per 25,000 sockets]
	Drain     time.Duration // longest wait for a move to reach every socket [30s]

	// CPUProfile, if set, is the file of a CPU profile of this process
	// taken over the moves.
	CPUProfile string

	// ClientCommand returns the command of one client process: it must run
	// RunLineClient with the given argument (a JSON LineClientConfig),
	// stdin and stdout (the stampede binary: bench-push --line-client).
	ClientCommand func(arg string) *exec.Cmd
	Logf          func(format string, args ...any)
}

// LineResult is what RunLine measured. Latencies are in milliseconds from
// the PublishLine call to the socket's receipt.
type LineResult struct {
	Requested int    `json:"requestedSockets"`
	Sockets   int    `json:"sockets"` // sockets held: connected and following the line
	Failed    int    `json:"failed"`  // sockets that could not connect or subscribe
	Clients   int    `json:"clientProcesses"`
	Sources   int    `json:"sourceAddresses"`
	Note      string `json:"note,omitempty"`

	ConnectSeconds float64 `json:"connectSeconds"`

	Moves []LineMove `json:"moves"`
	// Over every move: the socket latencies and the slowest move's last one.
	P50Ms       float64 `json:"p50Ms"`
	P99Ms       float64 `json:"p99Ms"`
	MaxMs       float64 `json:"maxMs"`
	Reached     int64   `json:"reached"`  // (socket, move) pairs whose new place arrived
	Expected    int64   `json:"expected"` // sockets × moves
	Wrong       int64   `json:"wrong"`    // places that were not ticket − upTo or went backwards
	Goroutines0 int     `json:"goroutinesBefore"`
	Goroutines1 int     `json:"goroutinesConnected"`

	HeapBeforeKB    float64 `json:"heapBeforeKB"` // HeapAlloc after a GC
	HeapConnectedKB float64 `json:"heapConnectedKB"`
	StackBeforeKB   float64 `json:"stackBeforeKB"` // StackInuse
	StackConnectKB  float64 `json:"stackConnectedKB"`
	RSSBeforeKB     int64   `json:"rssBeforeKB"`
	RSSConnectedKB  int64   `json:"rssConnectedKB"`
	RSSAfterKB      int64   `json:"rssAfterKB"` // after the moves, sockets still open
	HeapKBPerSocket float64 `json:"heapKBPerSocket"`
	StackKBPerSock  float64 `json:"stackKBPerSocket"`
	RSSKBPerSocket  float64 `json:"rssKBPerSocket"`      // (connected − before) / sockets
	RSSKBAfterMoves float64 `json:"rssKBPerSocketAfter"` // (after − before) / sockets

	// CPU time over the moves (from the first PublishLine to the last
	// socket's receipt, plus the waits between moves): of the hub's process
	// (getrusage) and of the client processes (/proc/<pid>/stat), and the
	// hub's per (socket, move) reached.
	HubCPUSeconds    float64 `json:"hubCPUSeconds"`
	ClientCPUSeconds float64 `json:"clientCPUSeconds"`
	HubCPUUsPerPlace float64 `json:"hubCPUMicrosPerPlace"`

	ScaleTargetMet  bool `json:"scaleTargetMet"`  // ≥ 100,000 sockets held
	MemoryTargetMet bool `json:"memoryTargetMet"` // RSS ≤ 20 KB per socket, also after the moves
	FanoutTargetMet bool `json:"fanoutTargetMet"` // every move reached every socket, the last within 2 s
}

// LineMove is one move of the line.
type LineMove struct {
	UpTo      int64   `json:"upTo"`
	PublishMs float64 `json:"publishMs"` // the PublishLine call: every socket's message queued
	Reached   int64   `json:"reached"`
	Wrong     int64   `json:"wrong"`
	P50Ms     float64 `json:"p50Ms"`
	P99Ms     float64 `json:"p99Ms"`
	MaxMs     float64 `json:"maxMs"` // the last socket reached
}

// String is a one-line summary.
func (r LineResult) String() string {
	return fmt.Sprintf("sockets=%d/%d reached=%d/%d p50=%.1fms p99=%.1fms max=%.1fms heap/socket=%.1fKB stack/socket=%.1fKB rss/socket=%.1fKB (after moves %.1fKB)",
		r.Sockets, r.Requested, r.Reached, r.Expected, r.P50Ms, r.P99Ms, r.MaxMs, r.HeapKBPerSocket, r.StackKBPerSock, r.RSSKBPerSocket, r.RSSKBAfterMoves)
}

func (c *LineConfig) defaults() error {
	if c.JWTSecret == "" || c.ClientCommand == nil {
		return errors.New("pushbench: JWTSecret and ClientCommand are required")
	}
	if c.Verifier == nil {
		c.Verifier = auth.NewVerifier([]byte(c.JWTSecret))
	}
	if c.Sockets <= 0 {
		c.Sockets = TargetLineSockets
	}
	if c.Updates <= 0 {
		c.Updates = 5
	}
	if c.Step <= 0 {
		c.Step = 1000
	}
	if c.Interval <= 0 {
		c.Interval = 3 * time.Second
	}
	if c.PerClient <= 0 {
		c.PerClient = 10_000
	}
	if c.Sources <= 0 {
		c.Sources = (c.Sockets + 24_999) / 25_000
	}
	if c.Drain <= 0 {
		c.Drain = 30 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// lineProduct is the product whose line the run moves.
const lineProduct = 28

// lineTickets gives user base+i the place first+i, with the ticket id
// lineTicketID(first+i).
type lineTickets struct{ base, first, n int64 }

func (l lineTickets) Ticket(_ context.Context, userID, productID int64) (push.LinePlace, error) {
	if i := userID - l.base; productID == lineProduct && i >= 0 && i < l.n {
		return push.LinePlace{Ticket: lineTicketID(l.first + i), Place: l.first + i}, nil
	}
	return push.LinePlace{}, nil
}

// Places is never asked: every ticket of the run has its place.
func (l lineTickets) Places(context.Context, int64, []int64) (map[int64]int64, error) {
	return map[int64]int64{}, nil
}

// lineTicketID is the opaque ticket id of place p in the run: its 16 hex
// digits, which the clients read back.
func lineTicketID(p int64) string { return fmt.Sprintf("%016x", p) }

type noSnapshotsLoaded struct{}

func (noSnapshotsLoaded) OrderSnapshot(context.Context, int64, string) (push.Snapshot, error) {
	return push.Snapshot{}, push.ErrNotFound
}
func (noSnapshotsLoaded) RecentOrders(context.Context, int64, int) ([]push.Snapshot, error) {
	return nil, nil
}

// memSample is the hub process's memory at one moment.
type memSample struct {
	heap, stack float64 // KB
	rss         int64   // KB
	goroutines  int
}

func sampleMemory(gc bool) (memSample, error) {
	if gc {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, err := VmRSS(os.Getpid())
	return memSample{heap: float64(ms.HeapAlloc) / 1024, stack: float64(ms.StackInuse) / 1024, rss: rss,
		goroutines: runtime.NumGoroutine()}, err
}

// RunLine runs the waiting-room fan-out benchmark (see above).
func RunLine(ctx context.Context, cfg LineConfig) (LineResult, error) {
	if err := cfg.defaults(); err != nil {
		return LineResult{}, err
	}
	res := LineResult{Requested: cfg.Sockets}
	n, note, err := fdBudget(cfg.Sockets, false)
	if err != nil {
		return res, err
	}
	res.Note = note
	if note != "" {
		cfg.Logf("%s", note)
	}
	base := int64(2_000_000_000)
	first := int64(cfg.Updates)*cfg.Step + 1 // nobody is admitted during the run
	hub, url, stopHub, err := serveLineHub(cfg, lineTickets{base: base, first: first, n: int64(n)})
	if err != nil {
		return res, err
	}
	defer stopHub()
	before, err := sampleMemory(true)
	if err != nil {
		return res, err
	}
	res.HeapBeforeKB, res.StackBeforeKB, res.RSSBeforeKB, res.Goroutines0 = before.heap, before.stack, before.rss, before.goroutines

	start := time.Now()
	clients, err := startLineClients(ctx, cfg, url, base, first, n, &res)
	defer clients.stop(cfg.Logf)
	if err != nil {
		return res, err
	}
	res.ConnectSeconds = time.Since(start).Seconds()
	cfg.Logf("%d sockets following the line (%d failed) in %.1fs over %d client processes and %d source addresses",
		res.Sockets, res.Failed, res.ConnectSeconds, res.Clients, res.Sources)
	if res.Sockets == 0 {
		return res, errors.New("pushbench: no socket connected")
	}
	time.Sleep(2 * time.Second) // let connects' stragglers settle
	conn, err := sampleMemory(true)
	if err != nil {
		return res, err
	}
	res.HeapConnectedKB, res.StackConnectKB, res.RSSConnectedKB, res.Goroutines1 = conn.heap, conn.stack, conn.rss, conn.goroutines
	per := func(a, b float64) float64 { return (a - b) / float64(res.Sockets) }
	res.HeapKBPerSocket, res.StackKBPerSock = per(conn.heap, before.heap), per(conn.stack, before.stack)
	res.RSSKBPerSocket = per(float64(conn.rss), float64(before.rss))

	if err := moveLine(ctx, cfg, hub, clients, &res); err != nil {
		return res, err
	}
	after, _ := sampleMemory(false)
	res.RSSAfterKB = after.rss
	res.RSSKBAfterMoves = per(float64(after.rss), float64(before.rss))

	res.ScaleTargetMet = res.Sockets >= TargetLineSockets
	res.MemoryTargetMet = res.RSSKBPerSocket <= TargetLineKBPerSocket && res.RSSKBAfterMoves <= TargetLineKBPerSocket
	res.FanoutTargetMet = len(res.Moves) == cfg.Updates && res.Reached == res.Expected && res.Wrong == 0
	for _, mv := range res.Moves {
		if time.Duration(mv.MaxMs*float64(time.Millisecond)) > TargetLineFanout {
			res.FanoutTargetMet = false
		}
	}
	return res, ctx.Err()
}

// serveLineHub serves a hub with the run's ticket book on a loopback port
// and publishes the line at 0; stop shuts it down.
func serveLineHub(cfg LineConfig, tickets lineTickets) (hub *push.Hub, url string, stop func(), err error) {
	// The clients open every socket at once from a few loopback source
	// addresses: no handshake limits (the run measures the fan-out).
	hub, err = push.New(push.Config{Lines: tickets, HandshakeAddrRate: -1, HandshakeUserRate: -1}, cfg.Verifier, noSnapshotsLoaded{}, "", nil)
	if err != nil {
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, fmt.Errorf("pushbench: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- hub.Serve(ctx, ln) }()
	hub.PublishLine(push.LineState{ProductID: lineProduct, Closed: true, Shuffled: true, UpTo: 0, Rate: float64(cfg.Step)})
	return hub, "ws://" + ln.Addr().String() + "/ws", func() {
		cancel()
		if err := <-served; err != nil {
			cfg.Logf("hub: %v", err)
		}
	}, nil
}

// moveLine moves the line cfg.Updates times, cfg.Interval apart, and
// records each move's latencies and the CPU time spent over them in res.
func moveLine(ctx context.Context, cfg LineConfig, hub *push.Hub, clients *lineClients, res *LineResult) error {
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	var all []int64 // µs, every socket of every move
	hubCPU0, clientCPU0 := selfCPU(), clients.cpu()
	for k := 1; k <= cfg.Updates && ctx.Err() == nil; k++ {
		upTo := int64(k) * cfg.Step
		t0 := time.Now()
		hub.PublishLine(push.LineState{ProductID: lineProduct, Closed: true, Shuffled: true, UpTo: upTo, Rate: float64(cfg.Step)})
		mv := LineMove{UpTo: upTo, PublishMs: ms(time.Since(t0).Microseconds())}
		lat, wrong, err := clients.collect(upTo, t0, cfg.Drain)
		if err != nil {
			return err
		}
		slices.Sort(lat)
		mv.Reached, mv.Wrong = int64(len(lat)), wrong
		mv.P50Ms, mv.P99Ms, mv.MaxMs = quantileMs(lat, 0.50), quantileMs(lat, 0.99), quantileMs(lat, 1)
		cfg.Logf("move %d (upTo %d): %d/%d reached, publish %.1fms, p50 %.1fms p99 %.1fms max %.1fms, %d wrong",
			k, upTo, mv.Reached, res.Sockets, mv.PublishMs, mv.P50Ms, mv.P99Ms, mv.MaxMs, wrong)
		res.Moves = append(res.Moves, mv)
		res.Reached += mv.Reached
		res.Wrong += wrong
		all = append(all, lat...)
		if k < cfg.Updates {
			select {
			case <-time.After(time.Until(t0.Add(cfg.Interval))):
			case <-ctx.Done():
			}
		}
	}
	res.Expected = int64(res.Sockets) * int64(len(res.Moves))
	res.HubCPUSeconds, res.ClientCPUSeconds = selfCPU()-hubCPU0, clients.cpu()-clientCPU0
	if res.Reached > 0 {
		res.HubCPUUsPerPlace = res.HubCPUSeconds * 1e6 / float64(res.Reached)
	}
	slices.Sort(all)
	res.P50Ms, res.P99Ms, res.MaxMs = quantileMs(all, 0.50), quantileMs(all, 0.99), quantileMs(all, 1)
	return nil
}

// startCPUProfile starts a CPU profile into path; the returned function
// stops it.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// selfCPU is this process's user and system CPU time in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// procCPU is the user and system CPU time of process pid in seconds, from
// /proc/<pid>/stat (clock ticks of 1/100 s); 0 if unreadable.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command (field 2) is in parentheses and may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64) // field 14
	st, _ := strconv.ParseFloat(f[12], 64) // field 15
	return (ut + st) / 100
}

func ms(us int64) float64 { return float64(us) / 1000 }

// quantileMs returns the q-quantile (nearest rank) of sorted µs values in ms.
func quantileMs(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return ms(sorted[min(max(i, 0), len(sorted)-1)])
}

// lineClients are the running client processes.
type lineClients struct {
	procs []*lineClientProc
}

type lineClientProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startLineClients starts the client processes, each with its share of the
// n sockets, and waits until each reported its sockets following the line.
func startLineClients(ctx context.Context, cfg LineConfig, url string, base, first int64, n int, res *LineResult) (*lineClients, error) {
	cs := &lineClients{}
	sources := make([]string, cfg.Sources)
	for i := range sources {
		sources[i] = fmt.Sprintf("127.0.0.%d", 2+i)
	}
	res.Sources = len(sources)
	for off := 0; off < n; off += cfg.PerClient {
		cc := LineClientConfig{URL: url, JWTSecret: cfg.JWTSecret, ProductID: lineProduct,
			FirstUser: base + int64(off), FirstTicket: first + int64(off), Count: min(cfg.PerClient, n-off),
			Sources: sources, SourceOffset: off}
		if cfg.CPUProfile != "" {
			cc.CPUProfile = fmt.Sprintf("%s.client%d", cfg.CPUProfile, len(cs.procs))
		}
		arg, _ := json.Marshal(cc)
		cmd := cfg.ClientCommand(string(arg))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return cs, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return cs, err
		}
		if err := cmd.Start(); err != nil {
			return cs, fmt.Errorf("pushbench: start client process: %w", err)
		}
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		cs.procs = append(cs.procs, &lineClientProc{cmd: cmd, in: in, out: sc})
	}
	res.Clients = len(cs.procs)
	for _, p := range cs.procs {
		var r lineClientReply
		if err := p.reply(&r); err != nil {
			return cs, err
		}
		if r.Event != "ready" {
			return cs, fmt.Errorf("pushbench: client process: %s", r.Error)
		}
		res.Sockets += r.Sockets
		res.Failed += r.Failed
	}
	return cs, ctx.Err()
}

func (p *lineClientProc) reply(r *lineClientReply) error {
	if !p.out.Scan() {
		if err := p.out.Err(); err != nil {
			return fmt.Errorf("pushbench: read client process: %w", err)
		}
		return errors.New("pushbench: client process exited")
	}
	if err := json.Unmarshal(p.out.Bytes(), r); err != nil {
		return fmt.Errorf("pushbench: client process said %q: %w", p.out.Text(), err)
	}
	return nil
}

func (p *lineClientProc) send(c lineClientCommand) error {
	b, _ := json.Marshal(c)
	_, err := p.in.Write(append(b, '\n'))
	return err
}

// collect asks every client for the latencies (µs from t0) of the sockets
// whose place shows upTo, waiting up to drain for the last ones.
func (cs *lineClients) collect(upTo int64, t0 time.Time, drain time.Duration) ([]int64, int64, error) {
	cmd := lineClientCommand{Cmd: "collect", UpTo: upTo, T0: t0.UnixNano(), DrainMs: drain.Milliseconds()}
	for _, p := range cs.procs {
		if err := p.send(cmd); err != nil {
			return nil, 0, err
		}
	}
	var lat []int64
	var wrong int64
	for _, p := range cs.procs {
		var r lineClientReply
		if err := p.reply(&r); err != nil {
			return nil, 0, err
		}
		if r.Event != "collected" {
			return nil, 0, fmt.Errorf("pushbench: client process: %s", r.Error)
		}
		lat = append(lat, r.LatenciesUs...)
		wrong += r.Wrong
	}
	return lat, wrong, nil
}

// cpu is the client processes' CPU time in seconds.
func (cs *lineClients) cpu() float64 {
	var sum float64
	for _, p := range cs.procs {
		sum += procCPU(p.cmd.Process.Pid)
	}
	return sum
}

// stop closes the clients' sockets and waits for the processes.
func (cs *lineClients) stop(logf func(string, ...any)) {
	var wg sync.WaitGroup
	for _, p := range cs.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.send(lineClientCommand{Cmd: "close"})
			p.in.Close()
			done := make(chan error, 1)
			go func() { done <- p.cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil && !strings.Contains(err.Error(), "signal") {
					logf("client process: %v", err)
				}
			case <-time.After(60 * time.Second):
				_ = p.cmd.Process.Kill()
				logf("client process killed after 60s: %v", <-done)
			}
		}()
	}
	wg.Wait()
}
