package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/valyala/fasthttp"
)

// clientConfig is GET /api/config: {"pushUrl": "...", "currency": "USD"}:
// where the client finds the push WebSocket (Config.PushURL) and the ISO 4217
// currency its prices are in (Config.Currency). Without a configured URL it
// builds one from the request's Host header only with PushURLFromHost
// (development); otherwise pushUrl is absent and the client falls back to its
// own location's host.
func (s *Server) clientConfig(ctx *fasthttp.RequestCtx) {
	u := s.cfg.PushURL
	if u == "" && s.cfg.PushURLFromHost && s.pushPort != "" {
		if host := requestHostname(ctx); host != "" {
			u = "ws://" + host + ":" + s.pushPort + "/ws"
		}
	}
	b, _ := json.Marshal(struct {
		PushURL  string `json:"pushUrl,omitempty"`
		Currency string `json:"currency"`
	}{u, s.cfg.Currency})
	ctx.Response.Header.Set("Cache-Control", "no-store")
	httpapi.WriteBody(ctx, fasthttp.StatusOK, b)
}

// requestHostname is the hostname of the request's Host header (IPv6
// literals in brackets), or "" if it is not a plain host name or address:
// it is only ever used inside a URL or a CSP source, where anything else
// could inject text.
func requestHostname(ctx *fasthttp.RequestCtx) string {
	host := string(ctx.Host())
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip := net.ParseIP(host); ip != nil {
		if ip.To4() == nil {
			return "[" + ip.String() + "]"
		}
		return ip.String()
	}
	if host == "" || len(host) > 253 {
		return ""
	}
	for _, r := range host {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return ""
		}
	}
	return host
}

// Security headers of the client's files (static.go). The CSP fits the
// built client in client/dist: its own module script and stylesheet, the
// data: favicon, product pictures from any http(s) origin (an admin sets
// their URLs, validated in admin.go), JSON from this origin and the push
// WebSocket (Vue's :style bindings go through the CSSOM, which style-src does
// not restrict); no inline script or style, no eval, no frames, no plugins.
const (
	cspBase = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: https: http:; font-src 'self'; " +
		"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
	referrerPolicy = "no-referrer"
)

// contentSecurityPolicy is the CSP of one client response: cspBase plus a
// connect-src for this origin and the push WebSocket — the origin of
// Config.PushURL, or else ws:// and wss:// on the request's hostname at the
// push port (what /api/config or the client's fallback will connect to).
func (s *Server) contentSecurityPolicy(ctx *fasthttp.RequestCtx) string {
	connect := "connect-src 'self'"
	switch {
	case s.pushOrigin != "":
		connect += " " + s.pushOrigin
	case s.pushPort != "":
		if host := requestHostname(ctx); host != "" {
			connect += " ws://" + host + ":" + s.pushPort + " wss://" + host + ":" + s.pushPort
		}
	}
	return cspBase + "; " + connect
}

// setSecurityHeaders adds the client's security headers to ctx's response.
func (s *Server) setSecurityHeaders(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	h.Set("Content-Security-Policy", s.contentSecurityPolicy(ctx))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", referrerPolicy)
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// pushSources returns the push port (of PushAddr, or 8081, the client's
// fallback) and, with PushURL, its origin as a CSP source.
func pushSources(cfg Config) (port, origin string) {
	port = "8081"
	if cfg.PushAddr != "" {
		if _, p, err := net.SplitHostPort(cfg.PushAddr); err == nil && p != "" && p != "0" {
			port = p
		}
	}
	if cfg.PushURL != "" {
		if u, err := url.Parse(cfg.PushURL); err == nil {
			origin = u.Scheme + "://" + u.Host
		}
	}
	return port, origin
}

// validatePush checks PushURL and PushAddr (Config.Validate).
func (c *Config) validatePush() error {
	if c.PushURL != "" {
		if u, err := url.Parse(c.PushURL); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
			return errors.New("invalid config: " + fmt.Sprintf("PushURL %q is not a ws:// or wss:// URL", c.PushURL))
		}
	}
	if c.PushAddr != "" {
		if _, _, err := net.SplitHostPort(c.PushAddr); err != nil {
			return errors.New("invalid config: " + fmt.Sprintf("PushAddr %q is not host:port", c.PushAddr))
		}
	}
	return nil
}

// validCurrency reports whether c looks like an ISO 4217 code: three
// upper-case ASCII letters.
func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := range 3 {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}
