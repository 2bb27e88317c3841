package gateway

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// Issue 26: identity providers' subjects (UUIDs, opaque strings) as buyers.

const (
	buyersIssuer = "https://id.shop.test/realms/buyers"
	staffIssuer  = "https://id.shop.test/realms/staff"
	idpAudience  = "stampede"
)

// testIdP is one RSA key published as a JWKS on loopback, signing the tokens
// of both test issuers.
type testIdP struct {
	t   testing.TB
	key *rsa.PrivateKey
	url string
	jti atomic.Int64
}

func newTestIdP(t testing.TB) *testIdP {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := jwk.Import(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pub.Set(jwk.KeyIDKey, "k1")
	set := jwk.NewSet()
	set.AddKey(pub)
	body, _ := json.Marshal(set)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return &testIdP{t: t, key: key, url: srv.URL + "/jwks"}
}

// token is a fresh token (its own jti: never a token-cache hit) of sub at
// iss; extra claims are added.
func (p *testIdP) token(iss, sub string, extra jwt.MapClaims) string {
	p.t.Helper()
	c := jwt.MapClaims{"iss": iss, "sub": sub, "aud": idpAudience, "exp": time.Now().Add(time.Hour).Unix(),
		"jti": fmt.Sprint(p.jti.Add(1))}
	for k, v := range extra {
		c[k] = v
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// countingSubjects is the store as a SubjectMapper, counting its calls;
// with fail set every call fails as a MySQL outage would.
type countingSubjects struct {
	store *persistence.Store
	calls atomic.Int64
	fail  atomic.Bool
}

func (c *countingSubjects) MapSubject(ctx context.Context, issuer, subject string) (int64, error) {
	c.calls.Add(1)
	if c.fail.Load() {
		return 0, errors.New("mysql: connection refused")
	}
	return c.store.MapSubject(ctx, issuer, subject)
}

// verifierFor is what the binary builds for one gateway process: the
// provider's two issuers, the shared HS256 secret (the tests' admin and
// product helpers use it), subjects mapped through m.
func verifierFor(t testing.TB, p *testIdP, m auth.SubjectMapper) *auth.Verifier {
	t.Helper()
	v, err := auth.New(context.Background(), auth.Options{
		Secret:    testJWTSecret,
		Providers: []auth.Provider{{Issuer: buyersIssuer, JWKSURL: p.url}, {Issuer: staffIssuer, JWKSURL: p.url}},
		Audience:  idpAudience, Subjects: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// TestProviderSubjectsAcrossGateways: UUID subjects of two issuers order on
// one gateway and replay on another (each with its own verifier and
// caches): the replay lands on the same internal id and orderNo; the same
// UUID under the other issuer is another buyer; the orders are stored under
// the mapped ids; support finds them by subject.
func TestProviderSubjectsAcrossGateways(t *testing.T) {
	p := newTestIdP(t)
	e := newEnv(t)
	mapA := &countingSubjects{store: e.store}
	srvA, err := New(withVerifier(verifierFor(t, p, mapA)), e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hcA, _ := serveInMemory(t, srvA)
	mapB := &countingSubjects{store: e.store}
	srvB, err := New(withVerifier(verifierFor(t, p, mapB)), e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hcB, _ := serveInMemory(t, srvB)
	pid := e.product(openSale(100))

	subs := []string{"3f6c1a52-8d0e-4c59-9a5e-0b7f3c1e2d4a", "9b2d7e11-4c3a-4f0e-8d61-2a5c9e7b3f10", "auth0|65f1c0ffee"}
	type placed struct{ iss, sub, no string }
	var all []placed
	for _, iss := range []string{buyersIssuer, staffIssuer} {
		for _, sub := range subs {
			rid := "rid-1" // the same requestId for everyone: scoped per user
			r := doHTTP(t, hcA, "POST", "/api/orders", p.token(iss, sub, nil), orderReq{pid, 1, rid})
			if r.status != 202 {
				t.Fatalf("%s %s on gateway A: %s", iss, sub, r)
			}
			no, _ := r.json(t)["orderNo"].(string)
			// The replay, with a fresh token of the same person, on B.
			r = doHTTP(t, hcB, "POST", "/api/orders", p.token(iss, sub, nil), orderReq{pid, 1, rid})
			if r.status != 200 || r.json(t)["orderNo"] != no {
				t.Fatalf("%s %s replay on gateway B: %s, want 200 %s", iss, sub, r, no)
			}
			all = append(all, placed{iss, sub, no})
		}
	}
	// Six people, six orders; the stored user ids are the mapped ones.
	users := map[int64]bool{}
	for _, o := range all {
		e.record(o.no) // what the writer stores
		stored, err := e.store.GetOrder(context.Background(), o.no)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := e.store.FindSubject(context.Background(), o.iss, o.sub)
		if err != nil || len(ids) != 1 || ids[0] != stored.UserID || stored.UserID < auth.FirstMappedUserID {
			t.Fatalf("%s %s: order of user %d, mapping %v %v", o.iss, o.sub, stored.UserID, ids, err)
		}
		users[stored.UserID] = true
		// The buyer reads it with yet another token, on either gateway.
		if r := doHTTP(t, hcB, "GET", "/api/orders/"+o.no, p.token(o.iss, o.sub, nil), nil); r.status != 200 {
			t.Fatalf("read own order: %s", r)
		}
	}
	if len(users) != len(all) {
		t.Fatalf("%d users for %d (issuer, subject) pairs", len(users), len(all))
	}
	// Someone else's order stays 404.
	if r := doHTTP(t, hcA, "GET", "/api/orders/"+all[0].no, p.token(buyersIssuer, subs[1], nil), nil); r.status != 404 {
		t.Fatalf("another subject's order: %s", r)
	}

	e.checkSupportBySubject(subs, all[3].no, all[4].no)
	if len(users) != 6 || mapA.calls.Load() != 6 || mapB.calls.Load() != 6 {
		t.Errorf("mapper calls A %d, B %d: want one per new subject (6) on each gateway", mapA.calls.Load(), mapB.calls.Load())
	}
}

// checkSupportBySubject: support finds staffNo (subs[0] at the staff issuer)
// by subject and issuer, is asked for the issuer of a subject both issuers
// know, finds nothing for an unknown one, and reads detailNo (subs[1] at the
// staff issuer) with the buyer's issuer and subject.
func (e *env) checkSupportBySubject(subs []string, staffNo, detailNo string) {
	t := e.t
	admin := token(t, adminID)
	search := func(q url.Values) resp { return e.do("GET", "/api/admin/orders?"+q.Encode(), admin, nil) }
	r := search(url.Values{"subject": {subs[0]}, "issuer": {staffIssuer}})
	if r.status != 200 || len(r.json(t)["orders"].([]any)) != 1 || r.json(t)["orders"].([]any)[0].(map[string]any)["orderNo"] != staffNo {
		t.Fatalf("search by staff subject: %s, want %s", r, staffNo)
	}
	if r := search(url.Values{"subject": {subs[2]}}); r.status != 400 { // under both issuers
		t.Fatalf("ambiguous subject without issuer: %s", r)
	}
	if r := search(url.Values{"subject": {"never-seen"}}); r.status != 200 || len(r.json(t)["orders"].([]any)) != 0 {
		t.Fatalf("unknown subject: %s", r)
	}
	e.do("GET", "/api/admin/orders?issuer="+url.QueryEscape(staffIssuer), admin, nil).wantError(t, 400, CodeInvalidArgument)
	e.do("GET", "/api/admin/orders?userId=5&subject=x", admin, nil).wantError(t, 400, CodeInvalidArgument)
	if m := e.do("GET", "/api/admin/orders/"+detailNo, admin, nil).json(t); m["issuer"] != staffIssuer || m["subject"] != subs[1] {
		t.Fatalf("admin order read: %v", m)
	}
}

// withVerifier is baseConfig with v as the verifier.
func withVerifier(v *auth.Verifier) Config {
	c := baseConfig()
	c.Verifier = v
	return c
}

// TestSubjectMappingOffTheHotPath: once a gateway knows a subject, its
// requests cost the mapping store nothing, also with a new token each time
// (a provider refreshing tokens): 2,000 requests of 100 known buyers with
// the store failing every call are all answered; before they were known,
// the same store failure answers 503 UNAVAILABLE (retry), never 401.
func TestSubjectMappingOffTheHotPath(t *testing.T) {
	p := newTestIdP(t)
	e := newEnv(t)
	m := &countingSubjects{store: e.store}
	srv, err := New(withVerifier(verifierFor(t, p, m)), e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := serveInMemory(t, srv)
	pid := e.product(openSale(1000))
	const buyers, rounds = 100, 20
	sub := func(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }
	for i := range buyers {
		if r := doHTTP(t, hc, "POST", "/api/orders", p.token(buyersIssuer, sub(i), nil), orderReq{pid, 1, "hot"}); r.status != 202 {
			t.Fatalf("first order of %d: %s", i, r)
		}
	}
	if got := m.calls.Load(); got != buyers {
		t.Fatalf("%d mapper calls for %d new subjects", got, buyers)
	}
	m.fail.Store(true) // from here any mapping read would fail the request
	var bad atomic.Int64
	var wg sync.WaitGroup
	for i := range buyers {
		wg.Go(func() {
			for range rounds {
				r := doHTTP(t, hc, "POST", "/api/orders", p.token(buyersIssuer, sub(i), nil), orderReq{pid, 1, "hot"})
				if r.status != 200 && bad.Add(1) < 5 {
					t.Errorf("replay of known buyer %d: %s", i, r)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d requests of known buyers, each with a new token: %d mapper calls (the first %d were the first sights)",
		buyers*rounds, m.calls.Load()-buyers, buyers)
	if got := m.calls.Load(); got != buyers || bad.Load() > 0 {
		t.Fatalf("mapper calls %d (want %d), %d requests failed", got, buyers, bad.Load())
	}
	// A new subject while the store fails: 503 with Retry-After, not 401.
	r := doHTTP(t, hc, "POST", "/api/orders", p.token(buyersIssuer, "new-buyer", nil), orderReq{pid, 1, "hot"})
	r.wantError(t, 503, CodeUnavailable)
	m.fail.Store(false)
	if r := doHTTP(t, hc, "POST", "/api/orders", p.token(buyersIssuer, "new-buyer", nil), orderReq{pid, 1, "hot"}); r.status != 202 {
		t.Fatalf("new buyer once the store is back: %s", r)
	}
}

// TestCanonicalIDsInPaths: a number in a path or query has one spelling
// (issue 26): "+7" or "007" name nothing.
func TestCanonicalIDsInPaths(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(5))
	admin := token(t, adminID)
	if r := e.do("GET", fmt.Sprintf("/api/products/%d", pid), "", nil); r.status != 200 {
		t.Fatalf("canonical id: %s", r)
	}
	for _, path := range []string{fmt.Sprintf("/api/products/0%d", pid), fmt.Sprintf("/api/products/+%d", pid)} {
		e.do("GET", path, "", malformed(nil)).wantError(t, 404, CodeProductNotFound)
	}
	e.do("GET", fmt.Sprintf("/api/admin/orders?productId=0%d", pid), admin, malformed(nil)).wantError(t, 400, CodeInvalidArgument)
	e.do("GET", "/api/admin/orders?userId=%2B5", admin, malformed(nil)).wantError(t, 400, CodeInvalidArgument)
}

// TestAdminActionsAudited (issue 26): a refund, a waiting-room change and a
// dead-letter replay each leave an admin_audit entry naming the admin — an
// identity provider's admin by issuer and subject too; before, none of the
// three was audited.
func TestAdminActionsAudited(t *testing.T) {
	p := newTestIdP(t)
	m := &countingSubjects{}
	e := newEnv(t, func(c *Config) { c.Ops = &fakeOps{}; c.Verifier = verifierFor(t, p, m) })
	m.store = e.store
	pid := e.product(openSale(10))
	e.refundPending(21, pid, "late-audit")
	if r := e.refund("late-audit", "RF-audit-1"); r.status != 200 {
		t.Fatalf("refund: %s", r)
	}
	if r := e.refund("late-audit", "RF-audit-1"); r.status != 200 { // a replay: no second entry
		t.Fatalf("refund replay: %s", r)
	}
	const staffSub = "5e0c9a1e-0d4b-4e57-b3a9-7f2c4d1e8a66"
	idpAdmin := p.token(staffIssuer, staffSub, jwt.MapClaims{"role": "admin"}) // no admin group configured: role admin
	room := e.roomProduct(10)
	if r := e.do("POST", fmt.Sprintf("/api/admin/products/%d/waiting-room", room), idpAdmin, `{"on":false}`); r.status != 200 {
		t.Fatalf("room off: %s", r)
	}
	if r := e.do("POST", "/api/admin/dlq/replay", token(t, adminID), `{"eventIds":["e-1"]}`); r.status != 200 {
		t.Fatalf("replay: %s", r)
	}
	r := e.do("GET", "/api/admin/audit?limit=50", token(t, adminID), nil)
	var list auditListJSON
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != 200 {
		t.Fatalf("audit: %s", r)
	}
	byAction := map[string][]auditEntryJSON{}
	for _, en := range list.Entries {
		byAction[en.Action] = append(byAction[en.Action], en)
	}
	staffID, _ := e.store.FindSubject(context.Background(), staffIssuer, staffSub)
	for _, c := range []struct {
		action, inChange string
		admin            int64
		issuer, subject  string
	}{
		{persistence.ActionRefund, `"refundNo":"RF-audit-1"`, adminID, "", ""},
		{persistence.ActionRoom, `"on":false`, staffID[0], staffIssuer, staffSub},
		{persistence.ActionReplay, `"eventIds":["e-1"]`, adminID, "", ""},
	} {
		got := byAction[c.action]
		if len(got) != 1 || got[0].AdminID != c.admin || got[0].AdminIssuer != c.issuer || got[0].AdminSubject != c.subject ||
			!strings.Contains(string(got[0].Change), c.inChange) {
			t.Errorf("%s: entries %+v, want one by admin %d %q %q with %s", c.action, got, c.admin, c.issuer, c.subject, c.inChange)
		}
	}
	if got := byAction[persistence.ActionRoom]; len(got) == 1 && (got[0].ProductID == nil || *got[0].ProductID != room) {
		t.Errorf("room entry of product %v, want %d", got[0].ProductID, room)
	}
}

// TestAdminActionLogsNameTheAdmin (issue 26): the log lines of a refund, a
// waiting-room change and a DLQ replay name the provider admin behind them
// by internal id, issuer and subject (adminAttrs), as the audit rows do.
func TestAdminActionLogsNameTheAdmin(t *testing.T) {
	p := newTestIdP(t)
	m := &countingSubjects{}
	mod := func(c *Config) { c.Ops = &fakeOps{}; c.Verifier = verifierFor(t, p, m) }
	e := newEnv(t, mod)
	m.store = e.store
	logs := &logBuffer{}
	cfg := baseConfig()
	mod(&cfg)
	srv, err := New(cfg, e.rdb, e.store, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.hc, e.ln = serveInMemory(t, srv)
	const staffSub = "9d2b7c4e-1f3a-4b6d-8e5f-0a1b2c3d4e5f"
	admin := p.token(staffIssuer, staffSub, jwt.MapClaims{"role": "admin"})
	pid := e.product(openSale(10))
	e.refundPending(22, pid, "log-admin")
	if r := e.do("POST", "/api/admin/payments/log-admin/refund", admin, map[string]string{"refundNo": "RF-log-1"}); r.status != 200 {
		t.Fatalf("refund: %s", r)
	}
	room := e.roomProduct(10)
	if r := e.do("POST", fmt.Sprintf("/api/admin/products/%d/waiting-room", room), admin, `{"on":false}`); r.status != 200 {
		t.Fatalf("room off: %s", r)
	}
	if r := e.do("POST", "/api/admin/dlq/replay", admin, `{"eventIds":["e-1"]}`); r.status != 200 {
		t.Fatalf("replay: %s", r)
	}
	ids, err := e.store.FindSubject(context.Background(), staffIssuer, staffSub)
	if err != nil || len(ids) != 1 {
		t.Fatalf("FindSubject: %v %v", ids, err)
	}
	found := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg          string `json:"msg"`
			AdminID      int64  `json:"adminId"`
			AdminIssuer  string `json:"adminIssuer"`
			AdminSubject string `json:"adminSubject"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch rec.Msg {
		case "payment refunded", "waiting room set", "dead letters replayed":
			found[rec.Msg]++
			if rec.AdminID != ids[0] || rec.AdminIssuer != staffIssuer || rec.AdminSubject != staffSub {
				t.Errorf("%q names admin %d %q %q, want %d %q %q", rec.Msg, rec.AdminID, rec.AdminIssuer, rec.AdminSubject, ids[0], staffIssuer, staffSub)
			}
		}
	}
	for _, msg := range []string{"payment refunded", "waiting room set", "dead letters replayed"} {
		if found[msg] != 1 {
			t.Errorf("%d %q lines, want 1:\n%s", found[msg], msg, logs.String())
		}
	}
}

// TestLookalikeSubjectsMapApart (issue 26): a provider's subjects are opaque
// strings. "+1001", "0001001", "1001" and "1001 " (VARBINARY: no padding)
// name four identities under a JWKS,
// each mapped (real MariaDB) to its own internal id, none of them user 1001
// of an HS256 token.
func TestLookalikeSubjectsMapApart(t *testing.T) {
	p := newTestIdP(t)
	store := persistencetest.New(t, "gateway")
	ids := map[int64]string{}
	for _, sub := range []string{"+1001", "0001001", "1001", "1001 "} {
		c, err := verifierFor(t, p, &countingSubjects{store: store}).Verify(p.token(buyersIssuer, sub, nil))
		if err != nil {
			t.Fatalf("sub %q: %v", sub, err)
		}
		if c.UserID < auth.FirstMappedUserID {
			t.Errorf("sub %q: user %d, want a mapped id (from %d)", sub, c.UserID, auth.FirstMappedUserID)
		}
		if other, dup := ids[c.UserID]; dup {
			t.Errorf("subs %q and %q both map to user %d", other, sub, c.UserID)
		}
		ids[c.UserID] = sub
		again, err := verifierFor(t, p, &countingSubjects{store: store}).Verify(p.token(buyersIssuer, sub, nil))
		if err != nil || again.UserID != c.UserID {
			t.Errorf("sub %q mapped again (fresh verifier): %d %v, want %d", sub, again.UserID, err, c.UserID)
		}
		if got, err := store.FindSubject(context.Background(), buyersIssuer, sub); err != nil || len(got) != 1 || got[0] != c.UserID {
			t.Errorf("FindSubject(%q) = %v %v, want [%d]", sub, got, err, c.UserID)
		}
	}
}
