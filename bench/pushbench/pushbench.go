// Package pushbench measures the push hub (issue 6): many concurrent WebSocket
// subscribers on one push instance while order status events flow through
// RabbitMQ. It reports the delivery latency from the status change
// (order.Event.OccurredAt, which push sends as updatedAt) to the client's
// receipt, and the push process's resident memory per connection.
//
// The benchmark and push must run on one machine (or on machines with
// synchronised clocks), since latency compares two clocks.
package pushbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/coder/websocket"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/push"
)

// Targets of issue 6.
const (
	TargetP99       = 100 * time.Millisecond
	TargetKBPerConn = 50.0
)

// Config configures one run. Zero values take the defaults in brackets.
type Config struct {
	PushURL   string // ws://host:port/ws of the push instance
	AMQPURL   string // RabbitMQ the push instance consumes from
	Exchange  string // topic exchange [order.EventsExchange]
	JWTSecret string // HS256 key push verifies tokens with

	Subscribers int // concurrent sockets, one user each [10000]
	Events      int // status events published [20000]
	Rate        int // events per second [2000]

	// PushPID is the push process, whose VmRSS is read before the sockets
	// connect and once they all are; 0 skips the memory measurement. When it
	// is this process (an in-process hub), both ends of every socket count
	// against this process's file descriptor limit.
	PushPID int

	DialConcurrency int           // sockets dialed at a time [200]
	Drain           time.Duration // longest wait for the last events after publishing [10s]
	Logf            func(format string, args ...any)
}

// Result is what a run measured. Latencies are in milliseconds.
type Result struct {
	Requested   int    `json:"requestedSubscribers"`
	Subscribers int    `json:"subscribers"` // sockets actually used
	Note        string `json:"note,omitempty"`

	Expected   int64 `json:"expected"`   // events published (each for one subscriber)
	Delivered  int64 `json:"delivered"`  // distinct events received by their user
	Duplicates int64 `json:"duplicates"` // events received more than once
	Misrouted  int64 `json:"misrouted"`  // events received by a socket of another user
	Dropped    int64 `json:"dropped"`    // sockets closed by the server during the run

	PublishSeconds float64 `json:"publishSeconds"`
	PublishRate    float64 `json:"publishRate"` // achieved events/s
	ConnectSeconds float64 `json:"connectSeconds"`

	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
	P99Ms  float64 `json:"p99Ms"`
	P999Ms float64 `json:"p999Ms"`
	MaxMs  float64 `json:"maxMs"`
	MeanMs float64 `json:"meanMs"`

	RSSBeforeKB    int64   `json:"rssBeforeKB"`    // push VmRSS with no benchmark sockets
	RSSConnectedKB int64   `json:"rssConnectedKB"` // with every socket connected
	RSSAfterKB     int64   `json:"rssAfterKB"`     // after the events, sockets still open
	KBPerConn      float64 `json:"kbPerConn"`      // (connected − before) / subscribers

	LatencyTargetMet bool `json:"latencyTargetMet"` // p99 ≤ 100 ms and every event delivered
	MemoryTargetMet  bool `json:"memoryTargetMet"`  // ≤ 50 KB per connection (false when not measured)
}

// String is a one-line summary.
func (r Result) String() string {
	return fmt.Sprintf("subscribers=%d delivered=%d/%d p50=%.2fms p99=%.2fms max=%.2fms rss/conn=%.1fKB latencyOK=%v memoryOK=%v",
		r.Subscribers, r.Delivered, r.Expected, r.P50Ms, r.P99Ms, r.MaxMs, r.KBPerConn, r.LatencyTargetMet, r.MemoryTargetMet)
}

func (c *Config) defaults() error {
	if c.PushURL == "" || c.AMQPURL == "" || c.JWTSecret == "" {
		return errors.New("pushbench: PushURL, AMQPURL and JWTSecret are required")
	}
	if c.Exchange == "" {
		c.Exchange = order.EventsExchange
	}
	if c.Subscribers <= 0 {
		c.Subscribers = 10000
	}
	if c.Events <= 0 {
		c.Events = 20000
	}
	if c.Rate <= 0 {
		c.Rate = 2000
	}
	if c.DialConcurrency <= 0 {
		c.DialConcurrency = 200
	}
	if c.Drain <= 0 {
		c.Drain = 10 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// fdBudget raises RLIMIT_NOFILE to what want sockets need (one descriptor
// per socket, two when push is this process) and returns how many fit. The
// soft limit goes up to the hard one; a hard limit below the need is raised
// too, which only a process with CAP_SYS_RESOURCE may do (and never past
// /proc/sys/fs/nr_open) — otherwise the sockets are reduced and the note
// says why.
func fdBudget(want int, inProcess bool) (int, string, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, "", fmt.Errorf("pushbench: getrlimit: %w", err)
	}
	open := 0
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		open = len(ents)
	}
	per := 1
	if inProcess {
		per = 2
	}
	const margin = 256
	need := uint64(want)*uint64(per) + uint64(open) + margin
	var refused error
	if need > lim.Max {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: need, Max: need}); err == nil {
			lim.Cur, lim.Max = need, need
		} else {
			refused = err
		}
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, "", fmt.Errorf("pushbench: setrlimit: %w", err)
		}
	}
	fit := (int(lim.Cur) - open - margin) / per
	if fit >= want {
		return want, "", nil
	}
	if fit < 1 {
		return 0, "", fmt.Errorf("pushbench: no file descriptors left (limit %d, %d open)", lim.Cur, open)
	}
	return fit, fmt.Sprintf("sockets reduced from %d to %d: RLIMIT_NOFILE hard limit is %d (%d fd per socket, %d open, %d spare), "+
		"and raising it to %d was refused (%v; it takes CAP_SYS_RESOURCE, or a higher hard limit from whoever starts the process)",
		want, fit, lim.Cur, per, open, margin, need, refused), nil
}

// VmRSS returns the resident set size of pid in KB, from /proc/<pid>/status.
func VmRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, errors.New("pushbench: no VmRSS in /proc status")
}

// subscriber is one socket of one user.
type subscriber struct {
	idx    int
	userID int64
	ws     *websocket.Conn
	// received counts order messages per version of this user's order,
	// guarded by mu (only the reader and the final tally touch it).
	mu       sync.Mutex
	received map[int64]int
}

// wireOrder is the part of push's order message the benchmark reads.
type wireOrder struct {
	Type      string    `json:"type"`
	OrderNo   string    `json:"orderNo"`
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updatedAt"`
}

type recorder struct {
	mu   sync.Mutex
	hist *hdrhistogram.Histogram
}

func (r *recorder) record(d time.Duration) {
	us := d.Microseconds()
	if us < 0 {
		us = 0 // clocks are the same; only rounding could do this
	}
	r.mu.Lock()
	_ = r.hist.RecordValue(us)
	r.mu.Unlock()
}

// Run runs the benchmark: it connects the subscribers, publishes the events at
// the configured rate, waits for them to arrive and closes everything.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	res := Result{Requested: cfg.Subscribers}
	n, note, err := fdBudget(cfg.Subscribers, cfg.PushPID == os.Getpid())
	if err != nil {
		return res, err
	}
	res.Subscribers, res.Note = n, note
	if note != "" {
		cfg.Logf("%s", note)
	}
	f, err := newFleet(cfg, n)
	if err != nil {
		return res, err
	}
	if cfg.PushPID > 0 {
		if res.RSSBeforeKB, err = VmRSS(cfg.PushPID); err != nil {
			return res, fmt.Errorf("pushbench: read push RSS: %w", err)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	f.stop = stop
	connectStart := time.Now()
	dialErr := f.dial(ctx, runCtx)
	defer f.closeAll()
	if dialErr != nil {
		return res, dialErr
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.ConnectSeconds = time.Since(connectStart).Seconds()
	cfg.Logf("%d subscribers connected in %.1fs", n, res.ConnectSeconds)
	if cfg.PushPID > 0 {
		time.Sleep(500 * time.Millisecond) // let the push process settle
		if res.RSSConnectedKB, err = VmRSS(cfg.PushPID); err != nil {
			return res, fmt.Errorf("pushbench: read push RSS: %w", err)
		}
		res.KBPerConn = float64(res.RSSConnectedKB-res.RSSBeforeKB) / float64(n)
	}

	// Publish.
	expected, pubErr := publish(runCtx, cfg, n, f.noOf, f.subs, &res)
	res.Expected = expected
	if pubErr != nil {
		return res, pubErr
	}
	cfg.Logf("published %d events in %.1fs (%.0f/s)", expected, res.PublishSeconds, res.PublishRate)
	deadline := time.Now().Add(cfg.Drain)
	for f.arrived.Load() < expected && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if cfg.PushPID > 0 {
		res.RSSAfterKB, _ = VmRSS(cfg.PushPID)
	}
	// Stop the readers before tallying.
	f.closeAll()
	f.tally(&res)
	return res, ctx.Err()
}

// fleet is the subscribers of one run and what their readers count.
// Subscriber i is user base+i and owns the single order FormatNo(base+i,
// 0, 1), whose version grows with each of its events.
type fleet struct {
	cfg     Config
	n       int
	base    int64
	subs    []*subscriber
	tokens  []string       // subscriber i's bearer token
	indexOf map[string]int // orderNo → subscriber
	hist    *recorder
	stop    context.CancelFunc // cancels the run's context (set by Run)

	readers                     sync.WaitGroup
	dropped, misrouted, arrived atomic.Int64 // arrived: order messages of the benchmark received
	closing                     atomic.Bool
}

// newFleet makes n subscribers of fresh users with their tokens.
func newFleet(cfg Config, n int) (*fleet, error) {
	f := &fleet{cfg: cfg, n: n, base: 1_000_000_000 + rand.Int64N(1_000_000_000),
		indexOf: make(map[string]int, n), subs: make([]*subscriber, n), tokens: make([]string, n),
		hist: &recorder{hist: hdrhistogram.New(1, 60_000_000, 3)}} // 1 µs … 60 s
	for i := range n {
		f.indexOf[f.noOf(i)] = i
	}
	for i := range n {
		f.subs[i] = &subscriber{idx: i, userID: f.base + int64(i), received: map[int64]int{}}
		var err error
		if f.tokens[i], err = auth.Issue([]byte(cfg.JWTSecret), f.base+int64(i), false, 2*time.Hour); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// noOf is subscriber i's order number.
func (f *fleet) noOf(i int) string { return order.FormatNo(f.base+int64(i), 0, 1) }

// dial connects every subscriber, DialConcurrency at a time, and waits for
// the pong of a ping: push answers it from the socket's reader, which
// starts after the socket is registered and its connect snapshots are
// queued, so after it no event can be missed and every snapshot has been
// read (and discarded). Each connected socket gets a reader on runCtx. The
// first dial error stops the run and is returned.
func (f *fleet) dial(ctx, runCtx context.Context) error {
	sem := make(chan struct{}, f.cfg.DialConcurrency)
	var dialWG sync.WaitGroup
	var dialErr error
	var dialMu sync.Mutex
	for i := range f.n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		dialWG.Add(1)
		go func() {
			defer dialWG.Done()
			defer func() { <-sem }()
			s := f.subs[i]
			err := s.connect(runCtx, f.cfg.PushURL, f.tokens[i])
			if err != nil {
				dialMu.Lock()
				if dialErr == nil {
					dialErr = fmt.Errorf("pushbench: subscriber %d: %w", i, err)
				}
				dialMu.Unlock()
				f.stop()
				return
			}
			f.readers.Add(1)
			go func() {
				defer f.readers.Done()
				s.read(runCtx, f.indexOf, f.hist, &f.arrived, &f.misrouted, &f.dropped, &f.closing)
			}()
		}()
		if (i+1)%1000 == 0 {
			f.cfg.Logf("dialed %d/%d", i+1, f.n)
		}
	}
	dialWG.Wait()
	return dialErr
}

// closeAll closes every socket and waits for the readers (closeAll).
func (f *fleet) closeAll() {
	closeAll(f.subs, f.cfg.DialConcurrency, &f.closing, f.stop, &f.readers)
}

// tally adds what the readers counted to res: deliveries, duplicates,
// misrouted and dropped messages, the latency quantiles and the targets.
func (f *fleet) tally(res *Result) {
	for _, s := range f.subs {
		s.mu.Lock()
		for _, c := range s.received {
			res.Delivered++
			if c > 1 {
				res.Duplicates += int64(c - 1)
			}
		}
		s.mu.Unlock()
	}
	res.Misrouted = f.misrouted.Load()
	res.Dropped = f.dropped.Load()
	h := f.hist.hist
	ms := func(us int64) float64 { return float64(us) / 1000 }
	res.P50Ms, res.P90Ms, res.P99Ms = ms(h.ValueAtQuantile(50)), ms(h.ValueAtQuantile(90)), ms(h.ValueAtQuantile(99))
	res.P999Ms, res.MaxMs, res.MeanMs = ms(h.ValueAtQuantile(99.9)), ms(h.Max()), h.Mean()/1000
	res.LatencyTargetMet = res.Delivered == res.Expected && res.Duplicates == 0 && res.Misrouted == 0 &&
		time.Duration(h.ValueAtQuantile(99))*time.Microsecond <= TargetP99
	res.MemoryTargetMet = f.cfg.PushPID > 0 && res.KBPerConn <= TargetKBPerConn
}

func (s *subscriber) connect(ctx context.Context, url, token string) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{Subprotocols: []string{push.Subprotocol, token}})
	if err != nil {
		return err
	}
	ws.SetReadLimit(1 << 16)
	if err := ws.Write(dctx, websocket.MessageText, []byte(`{"type":"ping"}`)); err != nil {
		ws.CloseNow()
		return err
	}
	for {
		_, b, err := ws.Read(dctx)
		if err != nil {
			ws.CloseNow()
			return fmt.Errorf("waiting for pong: %w", err)
		}
		if strings.Contains(string(b), `"pong"`) {
			break
		}
		// A connect snapshot or product message: discard.
	}
	s.ws = ws
	return nil
}

// read records the benchmark's order messages until the socket is closed.
func (s *subscriber) read(ctx context.Context, indexOf map[string]int, hist *recorder,
	arrived, misrouted, dropped *atomic.Int64, closing *atomic.Bool) {
	for {
		_, b, err := s.ws.Read(ctx)
		now := time.Now()
		if err != nil {
			if !closing.Load() && ctx.Err() == nil {
				dropped.Add(1)
			}
			return
		}
		var m wireOrder
		if json.Unmarshal(b, &m) != nil || m.Type != "order" {
			continue
		}
		i, ours := indexOf[m.OrderNo]
		if !ours {
			continue // someone else's traffic or a snapshot
		}
		if i != s.idx {
			misrouted.Add(1)
			continue
		}
		hist.record(now.Sub(m.UpdatedAt))
		arrived.Add(1)
		s.mu.Lock()
		s.received[m.Version]++
		s.mu.Unlock()
	}
}

// publish sends cfg.Events status events at cfg.Rate, each to a random
// subscriber's order with that order's next version. Publisher confirms are
// off; the channel is flushed by closing it.
func publish(ctx context.Context, cfg Config, n int, noOf func(int) string, subs []*subscriber, res *Result) (int64, error) {
	conn, err := amqp.DialConfig(cfg.AMQPURL, amqp.Config{Heartbeat: 10 * time.Second, Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return 0, fmt.Errorf("pushbench: dial rabbitmq: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("pushbench: channel: %w", err)
	}
	if err := ch.ExchangeDeclare(cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return 0, fmt.Errorf("pushbench: declare exchange: %w", err)
	}
	key := order.RouteStatus(order.WaitingPay)
	versions := make([]int64, n)
	start := time.Now()
	interval := time.Second / time.Duration(cfg.Rate)
	var sent int64
	for k := range cfg.Events {
		if due := start.Add(time.Duration(k) * interval); time.Until(due) > time.Millisecond {
			select {
			case <-time.After(time.Until(due)):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		i := rand.IntN(n)
		versions[i]++
		no := noOf(i)
		ev := order.Event{
			EventID: order.StatusEventID(no, versions[i]), Type: order.EventStatusChanged, OrderNo: no,
			UserID: subs[i].userID, ProductID: 1, Quantity: 1, From: order.Processing, Status: order.WaitingPay,
			Version: versions[i], OccurredAt: time.Now(),
		}
		body, _ := json.Marshal(ev)
		if err := ch.PublishWithContext(ctx, cfg.Exchange, key, false, false, amqp.Publishing{
			ContentType: "application/json", Type: string(ev.Type), MessageId: ev.EventID, Body: body,
		}); err != nil {
			return sent, fmt.Errorf("pushbench: publish: %w", err)
		}
		sent++
	}
	res.PublishSeconds = time.Since(start).Seconds()
	if res.PublishSeconds > 0 {
		res.PublishRate = float64(sent) / res.PublishSeconds
	}
	if err := ch.Close(); err != nil {
		return sent, fmt.Errorf("pushbench: close channel: %w", err)
	}
	return sent, ctx.Err()
}

// closeAll closes every socket (normal closure, cfg.DialConcurrency at a
// time), stops the readers and waits for them. Only the first call acts.
func closeAll(subs []*subscriber, concurrency int, closing *atomic.Bool, stop context.CancelFunc, readers *sync.WaitGroup) {
	if !closing.CompareAndSwap(false, true) {
		return
	}
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for _, s := range subs {
		if s.ws == nil {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			done := make(chan struct{})
			go func() { s.ws.Close(websocket.StatusNormalClosure, "benchmark done"); close(done) }()
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				s.ws.CloseNow()
			}
		}()
	}
	wg.Wait()
	stop()
	readers.Wait()
}
