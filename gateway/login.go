package gateway

import (
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
)

// loginResponse is the body of a successful demo login.
type loginResponse struct {
	Token  string `json:"token"`
	UserID int64  `json:"userId"`
}

// login is POST /api/auth/login {"userId": 42}: the demo identity provider.
// Anyone may log in as any positive userId; ids in Config.AdminUsers get
// role admin. 404 when Config.DisableDemoLogin is set.
func (s *Server) login(ctx *fasthttp.RequestCtx) {
	if s.cfg.DisableDemoLogin {
		s.fail(ctx, errLoginDisabled)
		return
	}
	var userID int64
	fields := [...]field{intField("userId", &userID)}
	if err := decodeBody(ctx.PostBody(), s.cfg.MaxBodyBytes, fields[:]); err != nil {
		s.fail(ctx, err)
		return
	}
	if userID <= 0 {
		s.fail(ctx, invalidArg("userId must be a positive integer"))
		return
	}
	token, err := auth.Issue(s.cfg.JWTSecret, userID, s.admins[userID], s.cfg.TokenTTL)
	if err != nil {
		s.fail(ctx, fmt.Errorf("gateway: issue token: %w", err))
		return
	}
	s.writeJSON(ctx, fasthttp.StatusOK, loginResponse{Token: token, UserID: userID})
}
