package systest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// The identity provider of the production test (issue 26): the
// configuration is docs/production.md's example block, read verbatim, and the
// provider it names is served here under its own https host name — a TLS
// server with a certificate of a CA made for the test, reached through a
// CONNECT proxy on loopback. The binary gets exactly two variables more:
// HTTPS_PROXY (the proxy) and SSL_CERT_FILE (the CA), both read by Go's
// standard library, so its JWKS fetches are real https with certificate
// verification against a host name that is not loopback.

// identityPage is the page whose production identity example the test runs
// verbatim (docs/production.md, "Identity").
const identityPage = "../docs/production.md"

// identityExample returns the KEY=value lines of identityPage's production
// identity example, in order.
func identityExample(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(identityPage)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "<!-- production-identity-example")
	if !ok {
		t.Fatal(identityPage + " has no production-identity-example block")
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal(identityPage + ": the production-identity-example is not followed by a ```sh block")
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		if !strings.HasPrefix(l, "STAMPEDE_") || !strings.Contains(l, "=") {
			t.Fatalf("%s example line %q is not STAMPEDE_KEY=value", identityPage, l)
		}
		lines = append(lines, l)
	}
	return lines
}

// setting is the value of key among KEY=value lines.
func setting(lines []string, key string) string {
	for _, l := range lines {
		if k, v, _ := strings.Cut(l, "="); k == key {
			return v
		}
	}
	return ""
}

// realm is one provider of the example: its issuer and its served key set.
type realm struct {
	issuer string
	path   string // of its JWKS URL
	mu     sync.Mutex
	set    []byte
}

func (r *realm) publish(t *testing.T, keys map[string]any) {
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
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.set = b
	r.mu.Unlock()
}

// tlsIdP serves the example's realms over https under their host name.
type tlsIdP struct {
	realms   []*realm // in the order of STAMPEDE_JWT_ISSUER
	audience string
	group    string // STAMPEDE_JWT_ADMIN_GROUP
	env      []string
	fetches  atomic.Int64
	connects atomic.Int64
	jti      atomic.Int64
}

// newTLSIdP serves the providers that lines (docs/production.md's example) configure and
// returns them with the environment for the binary: lines plus HTTPS_PROXY
// and SSL_CERT_FILE.
func newTLSIdP(t *testing.T, lines []string) *tlsIdP {
	t.Helper()
	urls := strings.Split(setting(lines, "STAMPEDE_JWT_JWKS_URL"), ",")
	issuers := strings.Split(setting(lines, "STAMPEDE_JWT_ISSUER"), ",")
	if len(urls) != 2 || len(issuers) != 2 {
		t.Fatalf("the docs/production.md example configures %d key sets and %d issuers; the test expects two providers", len(urls), len(issuers))
	}
	p := &tlsIdP{audience: setting(lines, "STAMPEDE_JWT_AUDIENCE"), group: setting(lines, "STAMPEDE_JWT_ADMIN_GROUP")}
	host := ""
	for i, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "https" {
			t.Fatalf("docs/production.md JWKS URL %q: want https", raw)
		}
		if host != "" && u.Host != host {
			t.Fatalf("the example's JWKS URLs name two hosts (%s, %s): the test serves one", host, u.Host)
		}
		host = u.Host
		p.realms = append(p.realms, &realm{issuer: issuers[i], path: u.Path})
	}
	caPEM, cert := testCA(t, host)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, rl := range p.realms {
			if r.URL.Path == rl.path {
				p.fetches.Add(1)
				rl.mu.Lock()
				b := rl.set
				rl.mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				w.Write(b)
				return
			}
		}
		http.NotFound(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	proxy := p.connectProxy(t, host+":443", srv.Listener.Addr().String())
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	p.env = append(append([]string{}, lines...),
		"HTTPS_PROXY=http://"+proxy, "https_proxy=http://"+proxy, "NO_PROXY=", "no_proxy=", "SSL_CERT_FILE="+caFile)
	return p
}

// testCA makes a CA and a certificate for host signed by it: the CA's PEM
// and the server's key pair.
func testCA(t *testing.T, host string) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stampede systest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// connectProxy accepts CONNECT target and tunnels it to backend; anything
// else is refused. It returns its address.
func (p *tlsIdP) connectProxy(t *testing.T, target, backend string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil || req.Method != http.MethodConnect || req.Host != target {
					io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
					return
				}
				b, err := net.Dial("tcp", backend)
				if err != nil {
					io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
					return
				}
				defer b.Close()
				p.connects.Add(1)
				io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				go io.Copy(b, c)
				io.Copy(c, b)
			}()
		}
	}()
	return ln.Addr().String()
}

// token is a token of realm r for sub signed by key under kid, valid for
// ttl, with a fresh jti; extra claims are added (a nil value removes one).
func (p *tlsIdP) token(t *testing.T, r *realm, m jwt.SigningMethod, kid string, key any, sub string, ttl time.Duration, extra jwt.MapClaims) string {
	t.Helper()
	c := jwt.MapClaims{"iss": r.issuer, "sub": sub, "aud": p.audience, "exp": time.Now().Add(ttl).Unix(),
		"jti": fmt.Sprint(p.jti.Add(1))}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	tok := jwt.NewWithClaims(m, c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// uuid is a UUID-shaped subject for n (what Keycloak issues).
func uuid(n int64) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", n>>16, n) }
