package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/valyala/fasthttp"
	"gopkg.in/yaml.v3"

	"github.com/stampede-sh/stampede/api"
)

// The contract check: doHTTP (main_test.go) validates every request it
// sends and every response it gets against api/openapi.yaml, and fails the
// test on any mismatch — an undocumented route, method, status, header,
// field or error code. A test that sends a request outside the contract on
// purpose (malformed JSON, a wrong type, a missing header, an unknown path)
// wraps its body in malformed(...): its request is not validated, its
// response still is (against the Error schema when the route itself is
// unknown to the document).

// malformedBody is a request body (nil, string, []byte or a value to encode,
// as doHTTP takes) that is deliberately outside the contract.
type malformedBody struct{ body any }

// malformed marks a request as deliberately outside the API contract: doHTTP
// sends body as it would send it unwrapped, skips request validation, and
// still validates the response.
func malformed(body any) malformedBody { return malformedBody{body} }

// notAPIBody is a request body of a request that is not for the API.
type notAPIBody struct{ body any }

// notAPI marks a request for something the API document does not cover —
// the client's files (Config.StaticDir) or a route a test added with
// Server.Handle: neither request nor response is validated. The path must
// not be one the document has.
func notAPI(body any) notAPIBody { return notAPIBody{body} }

// The validator is slow to build (it compiles every schema): one per test
// binary. The library's caches are meant for concurrent use, but the tests
// call it from many goroutines at once, so calls are serialised; a check
// costs far less than the request.
var contract struct {
	once sync.Once
	mu   sync.Mutex
	v    validator.Validator
	err  error
}

// contractValidator returns the validator of api/openapi.yaml.
func contractValidator(t testing.TB) validator.Validator {
	t.Helper()
	contract.once.Do(func() {
		doc, err := libopenapi.NewDocument(api.OpenAPI())
		if err != nil {
			contract.err = fmt.Errorf("parse api/openapi.yaml: %w", err)
			return
		}
		// Security is the server's to check (401 is documented and tested);
		// formats (date-time, int64) are asserted. JSON numbers reach the
		// schema checks as float64, so int64 is checked to the precision of
		// a float64: 2^63-1 (a valid userId) reads as 2^63.
		v, errs := validator.NewValidator(doc, config.WithFormatAssertions(), config.WithoutSecurityValidation(),
			config.WithCustomFormat("int64", validInt64))
		if len(errs) > 0 {
			contract.err = fmt.Errorf("build validator: %v", errs)
			return
		}
		if ok, verrs := v.ValidateDocument(); !ok {
			contract.err = fmt.Errorf("api/openapi.yaml is not a valid OpenAPI document:\n%s", formatValidation(verrs))
			return
		}
		contract.v = v
	})
	if contract.err != nil {
		t.Fatal(contract.err)
	}
	return contract.v
}

// validInt64 is the int64 format check: a whole number within ±2^63.
func validInt64(v any) error {
	switch n := v.(type) {
	case float64:
		if n != math.Trunc(n) || n < math.MinInt64 || n > -math.MinInt64 {
			return fmt.Errorf("%v is not an int64", n)
		}
	case json.Number:
		if _, err := strconv.ParseInt(string(n), 10, 64); err != nil {
			return fmt.Errorf("%s is not an int64", n)
		}
	}
	return nil
}

// checkContract validates one exchange of doHTTP against the document and
// reports every mismatch with t.Errorf.
func checkContract(t testing.TB, method, path string, reqHeader http.Header, reqBody []byte, skipRequest, notAPI bool, r resp) {
	t.Helper()
	v := contractValidator(t)
	if notAPI {
		req, err := http.NewRequest(method, "http://gateway"+path, http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		contract.mu.Lock()
		_, errs := v.ValidateHttpRequestSync(req)
		contract.mu.Unlock()
		if !unknownRoute(errs) {
			t.Errorf("%s %s is marked notAPI but the document has it", method, path)
		}
		return
	}
	newReq := func() *http.Request {
		var rd io.Reader = http.NoBody
		if reqBody != nil {
			rd = bytes.NewReader(reqBody)
		}
		req, err := http.NewRequest(method, "http://gateway"+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = reqHeader.Clone()
		return req
	}
	hres := &http.Response{StatusCode: r.status, Header: r.header, Body: io.NopCloser(bytes.NewReader(r.body))}
	contract.mu.Lock()
	var reqErrs []*verrors.ValidationError
	if !skipRequest {
		_, reqErrs = v.ValidateHttpRequestSync(newReq())
	}
	hres.Request = newReq()
	_, resErrs := v.ValidateHttpResponse(hres.Request, hres)
	contract.mu.Unlock()
	if len(reqErrs) > 0 {
		t.Errorf("%s %s: request breaks api/openapi.yaml (wrap a deliberately bad one in malformed()):\n%s",
			method, path, formatValidation(reqErrs))
	}
	if skipRequest && unknownRoute(resErrs) {
		// A deliberately unknown path or method: the answer is still the
		// documented error envelope, 404 NOT_FOUND or 405 METHOD_NOT_ALLOWED.
		if err := checkUnroutedAnswer(r); err != nil {
			t.Errorf("%s %s (not in the document): %v", method, path, err)
		}
		return
	}
	if len(resErrs) > 0 {
		t.Errorf("%s %s: response %d breaks api/openapi.yaml:\n%s\nbody: %.500s",
			method, path, r.status, formatValidation(resErrs), r.body)
	}
}

// unknownRoute reports whether the validator refused the exchange because the
// document has no such path or operation.
func unknownRoute(errs []*verrors.ValidationError) bool {
	if len(errs) == 0 {
		return false
	}
	for _, e := range errs {
		if e.ValidationType != helpers.PathValidation {
			return false
		}
	}
	return true
}

// checkUnroutedAnswer checks the gateway's answer to a path or method it does
// not serve: the error envelope with NOT_FOUND or METHOD_NOT_ALLOWED.
func checkUnroutedAnswer(r resp) error {
	var b struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	d := json.NewDecoder(bytes.NewReader(r.body))
	d.DisallowUnknownFields()
	if err := d.Decode(&b); err != nil {
		return fmt.Errorf("answer %d %.200s is not the error envelope: %w", r.status, r.body, err)
	}
	switch {
	case r.status == 404 && b.Error.Code == CodeNotFound, r.status == 405 && b.Error.Code == CodeMethodNotAllowed:
	default:
		return fmt.Errorf("answer %d %s, want 404 %s or 405 %s", r.status, b.Error.Code, CodeNotFound, CodeMethodNotAllowed)
	}
	if b.Error.Message == "" {
		return fmt.Errorf("answer %d without a message", r.status)
	}
	return nil
}

// formatValidation renders the validator's errors, one per line with its
// schema failures.
func formatValidation(errs []*verrors.ValidationError) string {
	var sb strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&sb, "  - %s", e.Message)
		if e.Reason != "" && e.Reason != e.Message {
			fmt.Fprintf(&sb, ": %s", e.Reason)
		}
		sb.WriteByte('\n')
		for _, f := range e.SchemaValidationErrors {
			fmt.Fprintf(&sb, "      %s", f.Reason)
			if f.FieldPath != "" {
				fmt.Fprintf(&sb, " (at %s)", f.FieldPath)
			}
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// The document is valid OpenAPI 3.1 (contractValidator checks it) and the
// gateway serves it, byte for byte, at GET /api/openapi.yaml.
func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/api/openapi.yaml", "", nil)
	if r.status != 200 || !bytes.Equal(r.body, api.OpenAPI()) {
		t.Fatalf("GET /api/openapi.yaml: %d, %d bytes (want %d)", r.status, len(r.body), len(api.OpenAPI()))
	}
	if ct := r.header.Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("Content-Type %q", ct)
	}
}

// Every route the gateway registers is in the document, with its method,
// and every operation of the document is served: a new route without its
// contract, or a contract left behind by a removed route, fails here. The
// server runs with every optional route on (demo login and checkout) and
// with /metrics, which the binary adds outside production
// (cmd/stampede/roles.go).
func TestOpenAPICoversEveryRoute(t *testing.T) {
	e := newEnv(t)
	e.srv.Handle("GET", "/metrics", func(*fasthttp.RequestCtx) {})
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				documented[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	served := map[string]bool{}
	for method, paths := range e.srv.router.List() {
		for _, path := range paths {
			served[method+" "+path] = true
			if !documented[method+" "+path] {
				t.Errorf("%s %s is served but not in api/openapi.yaml", method, path)
			}
		}
	}
	for op := range documented {
		if !served[op] {
			t.Errorf("%s is in api/openapi.yaml but not served", op)
		}
	}
	if len(served) < 20 {
		t.Fatalf("only %d routes registered: %v", len(served), served)
	}
}

// errRecorder is a testing.TB that records Errorf instead of failing.
type errRecorder struct {
	testing.TB
	errs []string
}

func (r *errRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *errRecorder) Helper() {}

// The contract check fails on drift: each exchange below breaks the
// document in one way and must be reported; the control exchanges are
// documented and must not be.
func TestContractCheckCatchesDrift(t *testing.T) {
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	product := `{"id":1,"name":"w","price":1,"total":1,"available":1,"saleStart":"2026-12-01T15:00:00Z","saleEnd":null,` +
		`"perUserLimit":0,"maxPerOrder":1,"shards":1,"state":"live","paused":false,"soldOut":false,"waitingRoom":false}`
	buy := []byte(`{"productId":1,"quantity":1,"requestId":"r1"}`)
	accepted := resp{status: 202, header: http.Header{"Content-Type": {"application/json"}, "Location": {"/api/orders/0386168566532886528001"}},
		body: []byte(`{"orderNo":"0386168566532886528001","requestId":"r1","status":"PROCESSING"}`)}
	for _, tc := range []struct {
		name              string
		method, path      string
		body              []byte
		malformed, notAPI bool
		r                 resp
		want              string // "" = no error
	}{
		{name: "documented product", method: "GET", path: "/api/products/1", r: resp{200, jsonHeader, []byte(product)}},
		{name: "documented order", method: "POST", path: "/api/orders", body: buy, r: accepted},
		{name: "missing field", method: "GET", path: "/api/products/1",
			r: resp{200, jsonHeader, []byte(strings.Replace(product, `"state":"live",`, "", 1))}, want: "missing property 'state'"},
		{name: "extra field", method: "GET", path: "/api/products/1",
			r: resp{200, jsonHeader, []byte(strings.Replace(product, `"id":1,`, `"id":1,"colour":"red",`, 1))}, want: "'colour' not allowed"},
		{name: "wrong type", method: "GET", path: "/api/products/1",
			r: resp{200, jsonHeader, []byte(strings.Replace(product, `"price":1,`, `"price":"1",`, 1))}, want: "want integer"},
		{name: "undocumented status", method: "POST", path: "/api/orders", body: buy,
			r: resp{418, jsonHeader, []byte(`{"error":{"code":"SOLD_OUT","message":"x"}}`)}, want: "'418' does not exist"},
		{name: "undocumented error code", method: "POST", path: "/api/orders", body: buy,
			r: resp{409, jsonHeader, []byte(`{"error":{"code":"NOPE","message":"x"}}`)}, want: "NOPE"},
		{name: "code of another status", method: "POST", path: "/api/orders", body: buy,
			r: resp{409, jsonHeader, []byte(`{"error":{"code":"IDEMPOTENCY_KEY_REUSED","message":"x"}}`)}, want: "IDEMPOTENCY_KEY_REUSED"},
		{name: "missing header", method: "POST", path: "/api/orders", body: buy,
			r: resp{202, jsonHeader, accepted.body}, want: "Location"},
		{name: "bad request body", method: "POST", path: "/api/orders", body: []byte(`{"productId":"x"}`),
			r: resp{400, jsonHeader, []byte(`{"error":{"code":"INVALID_ARGUMENT","message":"x"}}`)}, want: "request breaks"},
		{name: "bad request body, malformed()", method: "POST", path: "/api/orders", body: []byte(`{"productId":"x"}`), malformed: true,
			r: resp{400, jsonHeader, []byte(`{"error":{"code":"INVALID_ARGUMENT","message":"x"}}`)}},
		{name: "undocumented route", method: "GET", path: "/api/nope",
			r: resp{404, jsonHeader, []byte(`{"error":{"code":"NOT_FOUND","message":"no such endpoint"}}`)}, want: "not found"},
		{name: "undocumented route, malformed()", method: "GET", path: "/api/nope", malformed: true,
			r: resp{404, jsonHeader, []byte(`{"error":{"code":"NOT_FOUND","message":"no such endpoint"}}`)}},
		{name: "undocumented route answering 200", method: "GET", path: "/api/nope", malformed: true,
			r: resp{200, jsonHeader, []byte(`{"page":1}`)}, want: "not the error envelope"},
		{name: "notAPI on a documented path", method: "GET", path: "/api/products/1", notAPI: true,
			r: resp{200, jsonHeader, []byte(product)}, want: "marked notAPI"},
	} {
		rec := &errRecorder{TB: t}
		hdr := http.Header{}
		if tc.body != nil {
			hdr.Set("Content-Type", "application/json")
		}
		checkContract(rec, tc.method, tc.path, hdr, tc.body, tc.malformed, tc.notAPI, tc.r)
		got := strings.Join(rec.errs, "\n")
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s: unexpected contract errors:\n%s", tc.name, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s: errors %q do not contain %q", tc.name, got, tc.want)
		}
	}
}

// BenchmarkContractCheck is the cost the contract check adds to one
// exchange of doHTTP (request and response validated): an order's 202.
func BenchmarkContractCheck(b *testing.B) {
	hdr := http.Header{"Content-Type": {"application/json"}}
	body := []byte(`{"productId":1,"quantity":1,"requestId":"r1"}`)
	r := resp{status: 202, header: http.Header{"Content-Type": {"application/json"}, "Location": {"/api/orders/0386168566532886528001"}},
		body: []byte(`{"orderNo":"0386168566532886528001","requestId":"r1","status":"PROCESSING"}`)}
	contractValidator(b)
	b.ReportAllocs()
	for b.Loop() {
		checkContract(b, "POST", "/api/orders", hdr, body, false, false, r)
	}
}

// Every error code the gateway declares (a Code* string constant of package
// httpapi, the error table's home) is in the document's ErrorCode enum, and
// the enum has no other.
func TestOpenAPIErrorCodes(t *testing.T) {
	fset := gotoken.NewFileSet()
	names, err := filepath.Glob("httpapi/*.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != gotoken.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == gotoken.STRING {
						code, _ := strconv.Unquote(lit.Value)
						declared[code] = true
					}
				}
			}
		}
	}
	var doc struct {
		Components struct {
			Schemas struct {
				ErrorCode struct {
					Enum []string `yaml:"enum"`
				} `yaml:"ErrorCode"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, c := range doc.Components.Schemas.ErrorCode.Enum {
		documented[c] = true
		if !declared[c] {
			t.Errorf("ErrorCode %s is documented but no gateway constant declares it", c)
		}
	}
	for c := range declared {
		if !documented[c] {
			t.Errorf("error code %s is declared in the gateway but not in the ErrorCode enum of api/openapi.yaml", c)
		}
	}
	if len(declared) < 20 {
		t.Fatalf("found only %d Code* constants: %v", len(declared), declared)
	}
}
