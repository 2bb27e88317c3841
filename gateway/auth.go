package gateway

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
)

// TokenVerifier checks a bearer token (*auth.Verifier is one).
type TokenVerifier interface {
	Verify(token string) (auth.Claims, error)
}

// bytesVerifier is a TokenVerifier that checks a token held in a byte slice
// without copying it (*auth.Verifier: a cached token costs no allocation).
type bytesVerifier interface {
	VerifyBytes(token []byte) (auth.Claims, error)
}

// authedHandler is a handler that needs a verified caller.
type authedHandler func(ctx *fasthttp.RequestCtx, c auth.Claims)

var bearerPrefix = []byte("bearer ")

// authed verifies "Authorization: Bearer <jwt>" and calls next with the
// claims; a missing or invalid token answers 401 UNAUTHENTICATED.
func (s *Server) authed(next authedHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		c, err := s.authenticate(ctx)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		next(ctx, c)
	}
}

// adminOnly is authed plus role admin (403 FORBIDDEN otherwise).
func (s *Server) adminOnly(next authedHandler) fasthttp.RequestHandler {
	return s.authed(func(ctx *fasthttp.RequestCtx, c auth.Claims) {
		if !c.Admin {
			s.fail(ctx, errForbidden)
			return
		}
		next(ctx, c)
	})
}

func (s *Server) authenticate(ctx *fasthttp.RequestCtx) (auth.Claims, error) {
	h := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	if len(h) <= len(bearerPrefix) || !bytes.EqualFold(h[:len(bearerPrefix)], bearerPrefix) {
		return auth.Claims{}, auth.ErrUnauthenticated
	}
	tok := bytes.TrimSpace(h[len(bearerPrefix):])
	if bv, ok := s.verifier.(bytesVerifier); ok {
		return bv.VerifyBytes(tok)
	}
	return s.verifier.Verify(string(tok))
}

// adminAttrs are the log attributes naming the admin behind an action: the
// user id and, for an identity provider's admin, its issuer and subject.
func adminAttrs(c auth.Claims) []any {
	attrs := []any{"adminId", c.UserID}
	if c.UserID >= auth.FirstMappedUserID {
		attrs = append(attrs, "adminIssuer", c.Issuer, "adminSubject", c.Subject)
	}
	return attrs
}
