package push

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/stampede-sh/stampede/auth"
)

// A user's socket over MaxSocketsPerUser closes that user's oldest socket
// with 4429 and a reason; the newer ones and other users' stay open.
func TestSocketCapClosesOldest(t *testing.T) {
	t.Parallel()
	h := startHub(t, Config{MaxSocketsPerUser: 3}, newMemSnapshots(), "", nil)
	other := dial(t, h.url, token(t, 2), dialOpts{})
	var mine []*client
	for i := range 3 {
		mine = append(mine, dial(t, h.url, token(t, 1), dialOpts{}))
		waitFor(t, wait, "socket registered", func() bool { return h.Stats().Sockets == int64(i+2) })
	}
	fourth := dial(t, h.url, token(t, 1), dialOpts{})
	code, reason := mine[0].closeStatus(wait)
	if code != StatusTooManySockets || !strings.Contains(reason, "too many sockets") || !strings.Contains(reason, "oldest") {
		t.Fatalf("oldest socket closed with %d %q, want %d and a reason", code, reason, StatusTooManySockets)
	}
	waitFor(t, wait, "3 + 1 sockets", func() bool { return h.Stats().Sockets == 4 })
	if n := h.Stats().OverCap; n != 1 {
		t.Fatalf("OverCap %d, want 1", n)
	}
	// The survivors still get messages.
	h.PublishProduct(7, 5, false)
	for _, c := range []*client{mine[1], mine[2], fourth, other} {
		if m := c.next(wait); m.Type != "product" {
			t.Fatalf("survivor got %+v", m)
		}
	}
}

func dialWithOrigin(t *testing.T, url, origin string, header http.Header) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if header == nil {
		header = http.Header{}
	}
	if origin != "" {
		header.Set("Origin", origin)
	}
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		Subprotocols: []string{Subprotocol, token(t, 1)},
		HTTPHeader:   header,
	})
	if err == nil {
		ws.Close(websocket.StatusNormalClosure, "")
	}
	return err
}

// By default a socket's Origin must be the page's own host (any port: the
// gateway serves the page on another port than push); "*" allows all.
func TestDefaultOriginIsOwnHost(t *testing.T) {
	t.Parallel()
	h := startHub(t, Config{}, newMemSnapshots(), "", nil) // listens on 127.0.0.1
	for _, ok := range []string{"", "http://127.0.0.1:8080", "https://127.0.0.1"} {
		if err := dialWithOrigin(t, h.url, ok, nil); err != nil {
			t.Errorf("Origin %q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://evil.example", "http://127.0.0.1.evil.example:8081", "null"} {
		if err := dialWithOrigin(t, h.url, bad, nil); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("Origin %q: %v, want a 403", bad, err)
		}
	}
	if n := h.Stats().OriginRefused; n != 3 {
		t.Errorf("OriginRefused %d, want 3", n)
	}
	anyOrigin := startHub(t, Config{AllowedOrigins: []string{"*"}}, newMemSnapshots(), "", nil)
	if err := dialWithOrigin(t, anyOrigin.url, "http://elsewhere.example:3000", nil); err != nil {
		t.Errorf(`AllowedOrigins "*": %v`, err)
	}
	if _, err := New(Config{AllowedOrigins: []string{"[bad"}}, auth.NewVerifier(testSecret), newMemSnapshots(), "", nil); err == nil || !strings.Contains(err.Error(), "AllowedOrigins") {
		t.Error("malformed origin pattern accepted")
	}
}

// Handshake headers are bounded like the gateway's: a 16 KiB header gets
// 431 before any upgrade.
func TestHandshakeHeaderBound(t *testing.T) {
	t.Parallel()
	h := startHub(t, Config{}, newMemSnapshots(), "", nil)
	err := dialWithOrigin(t, h.url, "", http.Header{"X-Padding": {strings.Repeat("a", 16<<10)}})
	if err == nil || !strings.Contains(err.Error(), "431") {
		t.Fatalf("16 KiB header: %v, want 431", err)
	}
	if err := dialWithOrigin(t, h.url, "", http.Header{"X-Padding": {strings.Repeat("a", 2<<10)}}); err != nil {
		t.Fatalf("2 KiB header: %v", err)
	}
}

// The debug log never quotes a handshake header's value: a token sent in
// the wrong header (Origin, Connection, Sec-WebSocket-Version) stays out of
// it, at every level (before, "websocket origin refused" logged the Origin
// and "websocket accept" the library's error, which quotes the header).
func TestDebugLogQuotesNoHeaderValue(t *testing.T) {
	var buf safeBuffer
	h, err := New(Config{HandshakeUserRate: -1, HandshakeAddrRate: -1}, auth.NewVerifier(testSecret), newMemSnapshots(), "",
		slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	const secret = "eyJ-s3cret-token-in-a-header"
	url := strings.Replace(serveHub(t, h, "", nil).url, "ws://", "http://", 1)
	for _, hdr := range []map[string]string{
		{"Origin": "http://evil.example/" + secret},
		{"Connection": "keep-alive, " + secret, "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="},
		{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": secret, "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="},
		{"Connection": "Upgrade", "Upgrade": secret, "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="},
	} {
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode < 400 {
			t.Fatalf("handshake with %v: %d, want a refusal", hdr, res.StatusCode)
		}
	}
	if strings.Contains(buf.String(), "s3cret") {
		t.Fatalf("the debug log quotes a header value:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "websocket origin refused") || !strings.Contains(buf.String(), "websocket accept") {
		t.Fatalf("the refusals were not logged:\n%s", buf.String())
	}
}

// safeBuffer is a bytes.Buffer safe for concurrent writes.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
