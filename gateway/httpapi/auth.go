package httpapi

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
type AuthedHandler func(ctx *fasthttp.RequestCtx, c auth.Claims)

var bearerPrefix = []byte("bearer ")

// Guard authenticates requests: Authed for any verified caller, AdminOnly
// for role admin. Its failures are answered by Ans.
type Guard struct {
	Verifier TokenVerifier
	Ans      *Answers
}

// Authed verifies "Authorization: Bearer <jwt>" and calls next with the
// claims; a missing or invalid token answers 401 UNAUTHENTICATED.
func (s *Guard) Authed(next AuthedHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		c, err := s.Authenticate(ctx)
		if err != nil {
			s.Ans.Fail(ctx, err)
			return
		}
		next(ctx, c)
	}
}

// AdminOnly is Authed plus role admin (403 FORBIDDEN otherwise).
func (s *Guard) AdminOnly(next AuthedHandler) fasthttp.RequestHandler {
	return s.Authed(func(ctx *fasthttp.RequestCtx, c auth.Claims) {
		if !c.Admin {
			s.Ans.Fail(ctx, ErrForbidden)
			return
		}
		next(ctx, c)
	})
}

// Authenticate returns the claims of the request's bearer token.
func (s *Guard) Authenticate(ctx *fasthttp.RequestCtx) (auth.Claims, error) {
	h := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	if len(h) <= len(bearerPrefix) || !bytes.EqualFold(h[:len(bearerPrefix)], bearerPrefix) {
		return auth.Claims{}, auth.ErrUnauthenticated
	}
	tok := bytes.TrimSpace(h[len(bearerPrefix):])
	if bv, ok := s.Verifier.(bytesVerifier); ok {
		return bv.VerifyBytes(tok)
	}
	return s.Verifier.Verify(string(tok))
}

// adminAttrs are the log attributes naming the admin behind an action: the
// user id and, for an identity provider's admin, its issuer and subject.
func AdminAttrs(c auth.Claims) []any {
	attrs := []any{"adminId", c.UserID}
	if c.UserID >= auth.FirstMappedUserID {
		attrs = append(attrs, "adminIssuer", c.Issuer, "adminSubject", c.Subject)
	}
	return attrs
}
