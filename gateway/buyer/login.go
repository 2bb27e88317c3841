package buyer

import (
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/httpapi"
)

// loginResponse is the body of a successful demo login.
type loginResponse struct {
	Token  string `json:"token"`
	UserID int64  `json:"userId"`
}

// login is POST /api/auth/login {"userId": 42}: the demo identity provider.
// Anyone may log in as any userId of the direct range (1 …
// auth.MaxDirectUserID); ids in Config.AdminUsers get admin tokens (at most
// auth.MaxAdminTokenTTL). 404 when Config.DisableDemoLogin is set.
func (s *API) login(ctx *fasthttp.RequestCtx) {
	if s.cfg.DisableDemoLogin {
		s.ans.Fail(ctx, httpapi.ErrLoginDisabled)
		return
	}
	var userID int64
	fields := [...]httpapi.Field{httpapi.IntField("userId", &userID)}
	if err := httpapi.DecodeBody(ctx.PostBody(), s.cfg.MaxBodyBytes, fields[:]); err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	if userID <= 0 || userID > auth.MaxDirectUserID {
		s.ans.Fail(ctx, httpapi.InvalidArg("userId must be an integer from 1 to %d", auth.MaxDirectUserID))
		return
	}
	admin, ttl := s.admins[userID], s.cfg.TokenTTL
	if admin {
		ttl = min(ttl, auth.MaxAdminTokenTTL)
	}
	token, err := s.signer.Issue(userID, admin, ttl)
	if err != nil {
		s.ans.Fail(ctx, fmt.Errorf("gateway: issue token: %w", err))
		return
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, loginResponse{Token: token, UserID: userID})
}
