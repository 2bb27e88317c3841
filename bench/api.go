package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/bench/loadgen"
)

// hostPort checks that raw is an http URL of a loopback host and returns its
// host:port. raw may list several gateways, comma-separated
// ("http://127.0.0.1:8080,http://127.0.0.1:8082"): the result is then their
// host:ports joined by commas, which fasthttp.HostClient dials round-robin,
// so the load spreads over the gateways.
func hostPort(raw string) (string, error) {
	if strings.Contains(raw, ",") {
		var addrs []string
		for _, part := range strings.Split(raw, ",") {
			a, err := hostPort(strings.TrimSpace(part))
			if err != nil {
				return "", err
			}
			addrs = append(addrs, a)
		}
		return strings.Join(addrs, ","), nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("url %q: %w", raw, err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return "", fmt.Errorf("url %q: want http://host:port", raw)
	}
	if u.Path != "" && u.Path != "/" {
		return "", fmt.Errorf("url %q: want no path", raw)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	if err := loadgen.CheckLoopback(addr); err != nil {
		return "", err
	}
	return addr, nil
}

// api makes the few non-load calls of the benchmark: readiness and admin.
type api struct {
	addr   string
	client *fasthttp.HostClient
}

func newAPI(addr string) *api {
	return &api{addr: addr, client: loadgen.NewClient(addr, 8, 30*time.Second)}
}

// do sends one request with a JSON body (nil = none) and returns the status
// and a copy of the body.
func (a *api) do(ctx context.Context, method, path, token string, body any) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	req.Header.SetHost(strings.Split(a.addr, ",")[0])
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		req.Header.SetContentType("application/json")
		req.SetBody(b)
	}
	timeout := 30 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if err := a.client.DoTimeout(req, resp, timeout); err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp.StatusCode(), bytes.Clone(resp.Body()), nil
}

// waitReady polls GET /readyz until it answers 200.
func (a *api) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last string
	for {
		status, body, err := a.do(ctx, "GET", "/readyz", "", nil)
		if err == nil && status == fasthttp.StatusOK {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %s", status, body)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %s", limit, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// productSpec is the body of POST /api/admin/products (docs/spec.md §3).
type productSpec struct {
	Name         string `json:"name"`
	Price        int64  `json:"price"`
	Stock        int64  `json:"stock"`
	SaleStart    string `json:"saleStart"`
	SaleEnd      string `json:"saleEnd"`
	PerUserLimit int64  `json:"perUserLimit"`
	Shards       int    `json:"shards"`
}

// createProduct creates a product on sale from a minute ago for a day and
// returns its id.
func (r *run) createProduct(ctx context.Context, t *target, name string, stock, perUserLimit int64) (int64, error) {
	admin, err := auth.Issue(r.env.JWTSecret, 1, true, time.Hour)
	if err != nil {
		return 0, err
	}
	now := time.Now().UTC()
	spec := productSpec{
		Name:  fmt.Sprintf("bench %s %s %s", name, t.Label, r.id),
		Price: 100, Stock: stock, PerUserLimit: perUserLimit, Shards: r.p.Shards,
		SaleStart: now.Add(-time.Minute).Format(time.RFC3339),
		SaleEnd:   now.Add(24 * time.Hour).Format(time.RFC3339),
	}
	status, body, err := t.api.do(ctx, "POST", "/api/admin/products", admin, spec)
	if err != nil {
		return 0, fmt.Errorf("create product: %w", err)
	}
	if status != fasthttp.StatusCreated {
		return 0, fmt.Errorf("create product: %d %s", status, body)
	}
	var p struct {
		ID json.Number `json:"id"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return 0, fmt.Errorf("create product: answer %s: %w", body, err)
	}
	id, err := strconv.ParseInt(p.ID.String(), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("create product: no id in %s", body)
	}
	r.logf("   product %d: %d units, per-user limit %d, %d shard(s)", id, stock, perUserLimit, r.p.Shards)
	return id, nil
}

// users are the simulated buyers: userIds and their pre-issued
// "Bearer <JWT>" header values.
type users struct {
	ids    []int64
	bearer [][]byte
}

// issueUsers signs n tokens for users base+1 … base+n, valid for 12 hours,
// on every core.
func issueUsers(secret []byte, n int, base int64) (*users, error) {
	u := &users{ids: make([]int64, n), bearer: make([][]byte, n)}
	workers := max(runtime.GOMAXPROCS(0), 1)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				id := base + int64(i) + 1
				tok, err := auth.Issue(secret, id, false, 12*time.Hour)
				if err != nil {
					errs[w] = err
					return
				}
				u.ids[i] = id
				u.bearer[i] = []byte("Bearer " + tok)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("bench: issue tokens: %w", err)
		}
	}
	return u, nil
}

// orderBuilder returns a loadgen Build function sending request i as
// POST /api/orders {"productId": pid, "quantity": 1, "requestId": prefix+key(i)}
// from buyer user(i).
func (r *run) orderBuilder(pid int64, prefix string, user func(i int64) int, key func(i int64) int64) func(int64, *fasthttp.Request) {
	head := []byte(`{"productId":` + strconv.FormatInt(pid, 10) + `,"quantity":1,"requestId":"` + prefix)
	bearer := r.users.bearer
	return func(i int64, req *fasthttp.Request) {
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/api/orders")
		req.Header.SetContentType("application/json")
		req.Header.SetBytesV("Authorization", bearer[user(i)])
		var a [192]byte
		b := append(a[:0], head...)
		b = strconv.AppendInt(b, key(i), 10)
		b = append(b, `"}`...)
		req.SetBody(b)
	}
}

// requestPrefix is the requestId prefix of one scenario on one target:
// unique per run, so requestIds never collide with earlier runs' orders of
// the same buyers (order_info has a unique (user_id, request_id)).
func (r *run) requestPrefix(t *target, tag string) string {
	return r.id + "." + strconv.Itoa(t.index) + "." + tag + "."
}

// orderClass is DefaultClassify with the 200 of a replayed request named
// "200 replay".
func orderClass(i int64, resp *fasthttp.Response, err error) string {
	if err == nil && resp.StatusCode() == fasthttp.StatusOK {
		return classReplay
	}
	return loadgen.DefaultClassify(i, resp, err)
}

// Outcome classes of POST /api/orders.
const (
	classAccepted = "202"
	classReplay   = "200 replay"
	classSoldOut  = "409 SOLD_OUT"
)
