package push

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/stampede-sh/stampede/auth"
)

// Issue 26: sockets follow their token, and handshakes are rate-limited.

// TestSocketClosedAtTokenExp: a socket whose token expires is closed with
// 4401 at its exp, after delivering what came before; a socket of a longer
// token stays open. Before, it kept delivering the user's events for ever.
func TestSocketClosedAtTokenExp(t *testing.T) {
	t.Parallel()
	snap := newMemSnapshots()
	h := startHub(t, Config{}, snap, "", nil)
	short, err := auth.Issue(testSecret, 1, false, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, h.url, short, dialOpts{})
	long := dial(t, h.url, token(t, 2), dialOpts{})
	waitFor(t, wait, "two sockets", func() bool { return h.Stats().Sockets == 2 })
	h.PublishProduct(7, 5, false)
	if m := c.next(wait); m.Type != "product" {
		t.Fatalf("before exp: %+v", m)
	}
	code, reason := c.closeStatus(10 * time.Second)
	if code != StatusUnauthenticated || reason != "token expired" {
		t.Fatalf("at exp: close %d %q, want 4401 \"token expired\"", code, reason)
	}
	if h.Stats().Expired != 1 {
		t.Errorf("stats %+v", h.Stats())
	}
	if m := long.next(wait); m.Type != "product" {
		t.Fatalf("the other socket: %+v", m)
	}
	select {
	case <-long.closed:
		t.Fatalf("the socket of a valid token closed: %v", long.err)
	default:
	}
}

// jwksServer publishes an RSA key under a kid, replaceable, with max-age=1 so
// the verifier refetches it every second.
type jwksServer struct {
	mu  sync.Mutex
	set []byte
	url string
}

func newJWKSServer(t *testing.T) *jwksServer {
	j := &jwksServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		j.mu.Lock()
		b := j.set
		j.mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=1")
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	j.url = srv.URL
	return j
}

func (j *jwksServer) publish(t *testing.T, keys map[string]*rsa.PublicKey) {
	t.Helper()
	set := jwk.NewSet()
	for kid, pub := range keys {
		k, err := jwk.Import(pub)
		if err != nil {
			t.Fatal(err)
		}
		k.Set(jwk.KeyIDKey, kid)
		set.AddKey(k)
	}
	b, _ := json.Marshal(set)
	j.mu.Lock()
	j.set = b
	j.mu.Unlock()
}

// mapSubjects maps every subject to one id per subject, in memory.
type mapSubjects struct {
	mu  sync.Mutex
	ids map[string]int64
}

func (m *mapSubjects) MapSubject(_ context.Context, iss, sub string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ids == nil {
		m.ids = map[string]int64{}
	}
	if _, ok := m.ids[iss+" "+sub]; !ok {
		m.ids[iss+" "+sub] = auth.FirstMappedUserID + int64(len(m.ids))
	}
	return m.ids[iss+" "+sub], nil
}

// TestSocketClosedWhenKeyWithdrawn: the provider drops the key a socket's
// token was signed with; once the verifier fetched the new set the socket
// closes with 4401. A socket of a key that stays is kept.
func TestSocketClosedWhenKeyWithdrawn(t *testing.T) {
	t.Parallel()
	k1, _ := rsa.GenerateKey(rand.Reader, 2048)
	k2, _ := rsa.GenerateKey(rand.Reader, 2048)
	idp := newJWKSServer(t)
	idp.publish(t, map[string]*rsa.PublicKey{"k1": &k1.PublicKey, "k2": &k2.PublicKey})
	const iss = "https://id.push.test/"
	v, err := auth.New(context.Background(), auth.Options{Providers: []auth.Provider{{Issuer: iss, JWKSURL: idp.url}},
		Subjects: &mapSubjects{}, JWKSMinRefresh: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	sign := func(kid string, key *rsa.PrivateKey, sub string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": iss, "sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	h := startHubWith(t, Config{KeyCheckInterval: 100 * time.Millisecond}, v, newMemSnapshots(), "", nil)
	gone := dial(t, h.url, sign("k1", k1, "0b1e6f3a-aaaa-4bbb-8ccc-000000000001"), dialOpts{})
	kept := dial(t, h.url, sign("k2", k2, "0b1e6f3a-aaaa-4bbb-8ccc-000000000002"), dialOpts{})
	waitFor(t, wait, "two sockets", func() bool { return h.Stats().Sockets == 2 })
	idp.publish(t, map[string]*rsa.PublicKey{"k2": &k2.PublicKey}) // k1 withdrawn
	code, reason := gone.closeStatus(15 * time.Second)
	if code != StatusUnauthenticated || !strings.Contains(reason, "withdrawn") {
		t.Fatalf("socket of the withdrawn key: close %d %q, want 4401", code, reason)
	}
	time.Sleep(500 * time.Millisecond) // several key checks after a refetch that kept k2
	select {
	case <-kept.closed:
		t.Fatalf("socket of the kept key closed: %v", kept.err)
	default:
	}
	if h.Stats().KeyWithdrawn != 1 {
		t.Errorf("stats %+v", h.Stats())
	}
}

// remoteAs is a listener whose connections report addr as their peer: the
// handshakes of a test come from a non-loopback client.
type remoteAs struct {
	net.Listener
	addr net.Addr
}

func (l remoteAs) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return peerConn{c, l.addr}, nil
}

type peerConn struct {
	net.Conn
	addr net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.addr }

// TestHandshakeRateLimits: one user opening sockets in a loop gets 1013 past
// its bucket, before any snapshot read; another user is not affected. One
// address past its bucket gets 429 with Retry-After before the upgrade.
// Before, 200 handshakes in 4 s each read the user's recent orders.
func TestHandshakeRateLimits(t *testing.T) {
	t.Parallel()
	t.Run("per user", func(t *testing.T) {
		snap := newMemSnapshots()
		// A bucket of 2 refilled every 5 s: the 20 handshakes take far less.
		h := startHub(t, Config{HandshakeUserRate: 0.2}, snap, "", nil)
		tok := token(t, 1)
		var refused, ok int
		for range 20 {
			c := dial(t, h.url, tok, dialOpts{})
			select {
			case <-c.closed:
				if websocket.CloseStatus(c.err) != websocket.StatusTryAgainLater {
					t.Fatalf("closed with %v", c.err)
				}
				refused++
			case <-time.After(300 * time.Millisecond): // still open: accepted
				ok++
			}
		}
		if ok != 2 || refused != 18 {
			t.Fatalf("20 handshakes of one user: %d accepted, %d refused with 1013; want 2 and 18", ok, refused)
		}
		if got := snap.calls.Load(); got != 2 {
			t.Errorf("%d snapshot reads for 2 accepted sockets", got)
		}
		other := dial(t, h.url, token(t, 2), dialOpts{})
		waitFor(t, wait, "the other user's socket", func() bool { return h.Stats().Sockets == 3 }) // 2 of user 1, 1 of user 2
		h.PublishProduct(7, 1, false)
		if m := other.next(wait); m.Type != "product" {
			t.Fatalf("another user: %+v", m)
		}
	})
	t.Run("per address", func(t *testing.T) {
		wrap := func(l net.Listener) net.Listener {
			return remoteAs{l, &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 40000}}
		}
		h := startHub(t, Config{HandshakeAddrRate: 0.2}, newMemSnapshots(), "", wrap) // a bucket of 2, refilled every 5 s
		var got429 int
		for i := range 6 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ws, res, err := websocket.Dial(ctx, h.url, &websocket.DialOptions{Subprotocols: []string{Subprotocol, token(t, int64(10+i))}})
			cancel()
			if err == nil {
				ws.CloseNow()
				continue
			}
			if res == nil || res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
				t.Fatalf("handshake %d: %v %v", i, res, err)
			}
			got429++
		}
		if got429 != 4 {
			t.Fatalf("%d of 6 handshakes from one address refused, want 4", got429)
		}
		if h.Stats().RateLimited != 4 {
			t.Errorf("stats %+v", h.Stats())
		}
	})
	// Loopback peers are not limited (a proxy on the same host, the bench's
	// sample sockets): they once shared one bucket, so a draw bench's 200
	// sample sockets got 100 refusals with 429.
	t.Run("loopback", func(t *testing.T) {
		h := startHub(t, Config{HandshakeAddrRate: 0.2}, newMemSnapshots(), "", nil) // a bucket of 2
		for i := range 6 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ws, res, err := websocket.Dial(ctx, h.url, &websocket.DialOptions{Subprotocols: []string{Subprotocol, token(t, int64(10+i))}})
			cancel()
			if err != nil {
				t.Fatalf("handshake %d from loopback: %v %v", i, res, err)
			}
			ws.CloseNow()
		}
		if h.Stats().RateLimited != 0 {
			t.Errorf("stats %+v", h.Stats())
		}
	})
}
