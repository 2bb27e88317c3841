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
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/push"
)

// LineClientConfig is one client process's share of a RunLine run: users
// FirstUser … FirstUser+Count−1 with tickets FirstTicket … on ProductID.
// Socket i binds to Sources[(SourceOffset+i) % len(Sources)], so that the
// run's sockets spread evenly over the loopback addresses and each address
// stays within the ephemeral port range.
type LineClientConfig struct {
	URL             string   `json:"url"`
	JWTSecret       string   `json:"jwtSecret"`
	ProductID       int64    `json:"productId"`
	FirstUser       int64    `json:"firstUser"`
	FirstTicket     int64    `json:"firstTicket"`
	Count           int      `json:"count"`
	Sources         []string `json:"sources"`
	SourceOffset    int      `json:"sourceOffset"`
	DialConcurrency int      `json:"dialConcurrency"` // [100]
	CPUProfile      string   `json:"cpuProfile,omitempty"`
}

// errWriter takes a client process's diagnostics (its stdout is the protocol).
var errWriter io.Writer = os.Stderr

// lineClientCommand is a line of a client process's stdin.
type lineClientCommand struct {
	Cmd     string `json:"cmd"` // collect | close
	UpTo    int64  `json:"upTo"`
	T0      int64  `json:"t0"` // Unix ns of the PublishLine call
	DrainMs int64  `json:"drainMs"`
}

// lineClientReply is a line of a client process's stdout.
type lineClientReply struct {
	Event       string  `json:"event"` // ready | collected | error
	Sockets     int     `json:"sockets,omitempty"`
	Failed      int     `json:"failed,omitempty"`
	LatenciesUs []int64 `json:"latenciesUs,omitempty"`
	Wrong       int64   `json:"wrong,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// lineSocket is one client socket and the last place it was sent. The
// reader writes at before pos, so whoever sees a pos sees its at.
type lineSocket struct {
	ticket int64
	ws     *websocket.Conn
	seq    uint64 // the reader's only

	pos   atomic.Int64 // 0: none yet
	at    atomic.Int64 // Unix ns of the receipt
	wrong atomic.Bool  // a message out of order or not this socket's
}

// wireQueue is the part of push's queue message the client reads.
type wireQueue struct {
	Type     string `json:"type"`
	TicketID string `json:"ticket"` // the place's lineTicketID
	Ticket   int64  `json:"-"`      // the place it names
	State    string `json:"state"`
	Position int64  `json:"position"`
	Seq      uint64 `json:"seq"`
}

// RunLineClient is a client process of RunLine: it opens its sockets,
// subscribes each to the line, reports {"event":"ready"} once each got its
// first place and then answers the commands on in (collect, close) on out,
// one JSON line each. arg is the JSON LineClientConfig.
func RunLineClient(ctx context.Context, arg string, in io.Reader, out io.Writer) error {
	var cfg LineClientConfig
	if err := json.Unmarshal([]byte(arg), &cfg); err != nil {
		return fmt.Errorf("pushbench: line client config: %w", err)
	}
	if cfg.Count <= 0 || cfg.URL == "" || len(cfg.Sources) == 0 {
		return errors.New("pushbench: line client: url, count and sources are required")
	}
	if cfg.DialConcurrency <= 0 {
		cfg.DialConcurrency = 100
	}
	enc := json.NewEncoder(out)
	if _, _, err := fdBudget(cfg.Count, false); err != nil { // raises the limit
		return err
	}
	socks, held := openLineSockets(ctx, cfg)
	if err := enc.Encode(lineClientReply{Event: "ready", Sockets: held, Failed: len(socks) - held}); err != nil {
		return err
	}
	defer closeLineSockets(socks)
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var c lineClientCommand
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return fmt.Errorf("pushbench: line client command %q: %w", sc.Text(), err)
		}
		switch c.Cmd {
		case "collect":
			lat, wrong := collectLine(socks, c)
			if err := enc.Encode(lineClientReply{Event: "collected", LatenciesUs: lat, Wrong: wrong}); err != nil {
				return err
			}
		case "close":
			return nil
		}
	}
	return sc.Err()
}

// openLineSockets opens the process's sockets, cfg.DialConcurrency at a
// time, and waits (up to 60 s) until each open one got its first place.
// held counts those; the others failed (the first error goes to errWriter).
func openLineSockets(ctx context.Context, cfg LineClientConfig) (socks []*lineSocket, held int) {
	clients := make([]*http.Client, len(cfg.Sources))
	for i, s := range cfg.Sources {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(s)}, Timeout: 30 * time.Second}
		clients[i] = &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	socks = make([]*lineSocket, cfg.Count)
	var failed atomic.Int64
	var firstErr atomic.Value
	sem := make(chan struct{}, cfg.DialConcurrency)
	var wg sync.WaitGroup
	for i := range socks {
		s := &lineSocket{ticket: cfg.FirstTicket + int64(i)}
		socks[i] = s
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			hc := clients[(cfg.SourceOffset+i)%len(clients)]
			if err := s.open(ctx, hc, cfg, cfg.FirstUser+int64(i)); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			go s.read()
		}()
	}
	wg.Wait()
	// Every open socket gets its first place (the line stands at 0).
	deadline := time.Now().Add(60 * time.Second)
	for {
		held = 0
		for _, s := range socks {
			if s.ws != nil && s.place() == s.ticket {
				held++
			}
		}
		if held+int(failed.Load()) >= len(socks) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e, _ := firstErr.Load().(string); e != "" {
		fmt.Fprintf(errWriter, "pushbench: line client: %d sockets failed, first: %s\n", failed.Load(), e)
	}
	return socks, held
}

// open dials the socket as userID and subscribes it to the line.
func (s *lineSocket) open(ctx context.Context, hc *http.Client, cfg LineClientConfig, userID int64) error {
	tok, err := auth.Issue([]byte(cfg.JWTSecret), userID, false, 2*time.Hour)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, cfg.URL, &websocket.DialOptions{HTTPClient: hc, Subprotocols: []string{push.Subprotocol, tok}})
	if err != nil {
		return err
	}
	sub, _ := json.Marshal(map[string]any{"type": "queue", "productId": cfg.ProductID})
	if err := ws.Write(dctx, websocket.MessageText, sub); err != nil {
		ws.CloseNow()
		return err
	}
	s.ws = ws
	return nil
}

// read records the socket's queue messages until it closes. It reads into
// one buffer and picks the fields out without encoding/json: the clients
// share the machine's CPU with the hub they measure.
func (s *lineSocket) read() {
	buf := make([]byte, 1024)
	for {
		b, err := readMessage(s.ws, buf)
		now := time.Now().UnixNano()
		if err != nil {
			return
		}
		if m, ok := parseQueue(b); ok {
			s.record(m, now)
		}
	}
}

// record notes a queue message received at now (Unix ns), flagging one
// that is not this socket's, not WAITING, out of order (seq not growing) or
// moving the socket back (position not falling).
func (s *lineSocket) record(m wireQueue, now int64) {
	if prev := s.pos.Load(); m.Ticket != s.ticket || m.State != "WAITING" || m.Seq <= s.seq || (prev != 0 && m.Position >= prev) {
		s.wrong.Store(true)
	}
	s.seq = m.Seq
	s.at.Store(now)
	s.pos.Store(m.Position)
}

// readMessage reads the next message into buf (growing it if too small).
func readMessage(ws *websocket.Conn, buf []byte) ([]byte, error) {
	_, r, err := ws.Reader(context.Background())
	if err != nil {
		return nil, err
	}
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		k, err := r.Read(buf[n:])
		n += k
		if errors.Is(err, io.EOF) {
			return buf[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// parseQueue reads push's queue message, {"type":"queue",…}; ok is false for
// any other message. Fields it cannot pick out send it to encoding/json.
func parseQueue(b []byte) (m wireQueue, ok bool) {
	if !bytes.HasPrefix(b, []byte(`{"type":"queue",`)) {
		return m, false
	}
	num := func(key string) (int64, bool) {
		i := bytes.Index(b, []byte(key))
		if i < 0 {
			return 0, false
		}
		j := i + len(key)
		k := j
		for k < len(b) && b[k] >= '0' && b[k] <= '9' {
			k++
		}
		v, err := strconv.ParseInt(string(b[j:k]), 10, 64)
		return v, err == nil
	}
	var ok1, ok2, ok3 bool
	var seq int64
	m.Type = "queue"
	if i := bytes.Index(b, []byte(`"ticket":"`)); i >= 0 && i+len(`"ticket":"`)+16 <= len(b) {
		j := i + len(`"ticket":"`)
		v, err := strconv.ParseInt(string(b[j:j+16]), 16, 64)
		m.Ticket, ok1 = v, err == nil
	}
	m.Position, ok2 = num(`"position":`)
	seq, ok3 = num(`"seq":`)
	m.Seq = uint64(seq)
	st := bytes.Index(b, []byte(`"state":"`))
	if st >= 0 {
		rest := b[st+len(`"state":"`):]
		if e := bytes.IndexByte(rest, '"'); e >= 0 {
			m.State = string(rest[:e])
		}
	}
	if !ok1 || !ok2 || !ok3 || m.State == "" {
		m = wireQueue{}
		if json.Unmarshal(b, &m) != nil || m.Type != "queue" {
			return m, false
		}
		m.Ticket, _ = strconv.ParseInt(m.TicketID, 16, 64)
		return m, true
	}
	return m, true
}

// place returns the socket's last position (0: none yet).
func (s *lineSocket) place() int64 { return s.pos.Load() }

// collectLine waits (up to c.DrainMs) until every open socket shows
// ticket − c.UpTo and returns the latencies of those that do, in µs from
// c.T0, and how many got a message out of order since the last collect.
func collectLine(socks []*lineSocket, c lineClientCommand) ([]int64, int64) {
	deadline := time.Now().Add(time.Duration(c.DrainMs) * time.Millisecond)
	for {
		reached := 0
		for _, s := range socks {
			if s.ws != nil && s.place() == s.ticket-c.UpTo {
				reached++
			}
		}
		if reached == countOpen(socks) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var lat []int64
	var wrong int64
	for _, s := range socks {
		if s.ws == nil {
			continue
		}
		if s.place() == s.ticket-c.UpTo {
			lat = append(lat, max(0, (s.at.Load()-c.T0)/1000))
		}
		if s.wrong.Swap(false) {
			wrong++
		}
	}
	return lat, wrong
}

func countOpen(socks []*lineSocket) int {
	n := 0
	for _, s := range socks {
		if s.ws != nil {
			n++
		}
	}
	return n
}

// closeLineSockets closes every open socket (normal closure), 200 at a time.
func closeLineSockets(socks []*lineSocket) {
	sem := make(chan struct{}, 200)
	var wg sync.WaitGroup
	for _, s := range socks {
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
}
