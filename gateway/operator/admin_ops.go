package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// AdminOps are the operator actions behind GET /api/admin/reconcile,
// GET /api/admin/dlq and POST /api/admin/dlq/replay. pipeline.Ops implements
// it; the gateway declares it so it does not import the pipeline. Every
// result must encode with encoding/json.
type AdminOps interface {
	Reconcile(ctx context.Context) (report any, ok bool, err error)
	DLQ(ctx context.Context, limit int) (any, error)
	ReplayDLQ(ctx context.Context, eventIDs []string, all, dropPoison bool) (any, error)
}

// adminOpsTimeout bounds one admin operation (a reconcile reads every
// product; a replay may move thousands of messages).
const adminOpsTimeout = 60 * time.Second

var errNoOps = &httpapi.APIError{Status: fasthttp.StatusServiceUnavailable, Code: httpapi.CodeUnavailable,
	Message: "admin operations are not configured on this gateway", RetryAfter: true}

// adminReconcile is GET /api/admin/reconcile: pipeline.Reconcile's report,
// 200 whether or not the invariants hold (see its "ok").
func (s *API) adminReconcile(ctx *fasthttp.RequestCtx, _ auth.Claims) {
	if s.cfg.Ops == nil {
		s.ans.Fail(ctx, errNoOps)
		return
	}
	c, cancel := s.callCtx(adminOpsTimeout)
	defer cancel()
	rep, _, err := s.cfg.Ops.Reconcile(c)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, rep)
}

// adminDLQ is GET /api/admin/dlq?limit=100 (1…1000): the dead-letter queue's
// depth, its first messages (peeked, not removed) and the DEAD outbox rows.
func (s *API) adminDLQ(ctx *fasthttp.RequestCtx, _ auth.Claims) {
	if s.cfg.Ops == nil {
		s.ans.Fail(ctx, errNoOps)
		return
	}
	limit := 100
	if v := ctx.QueryArgs().Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 1000 {
			s.ans.Fail(ctx, httpapi.InvalidArg("limit must be an integer from 1 to 1000"))
			return
		}
		limit = n
	}
	c, cancel := s.callCtx(adminOpsTimeout)
	defer cancel()
	rep, err := s.cfg.Ops.DLQ(c, limit)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, rep)
}

// adminReplay is POST /api/admin/dlq/replay
//
//	{"eventIds": ["..."]} or {"all": true}, optional "dropPoison": true
//
// It sets the outbox rows of the selected dead events back to NEW (the relay
// publishes them again; consumers deduplicate by event id) and removes their
// messages from the dead-letter queue. 200 with what it did, also written
// to admin_audit (action replay) with the admin; 400.
func (s *API) adminReplay(ctx *fasthttp.RequestCtx, c auth.Claims) {
	if s.cfg.Ops == nil {
		s.ans.Fail(ctx, errNoOps)
		return
	}
	var req struct {
		EventIDs   []string `json:"eventIds"`
		All        bool     `json:"all"`
		DropPoison bool     `json:"dropPoison"`
	}
	dec := json.NewDecoder(bytes.NewReader(ctx.PostBody()))
	dec.DisallowUnknownFields()
	if len(ctx.PostBody()) > 1<<20 {
		s.ans.Fail(ctx, httpapi.InvalidArg("body too large"))
		return
	}
	if err := dec.Decode(&req); err != nil {
		s.ans.Fail(ctx, httpapi.InvalidArg("body must be {\"eventIds\": [...]} or {\"all\": true}: %v", err))
		return
	}
	if req.All == (len(req.EventIDs) > 0) {
		s.ans.Fail(ctx, httpapi.InvalidArg("give either eventIds (non-empty) or all: true"))
		return
	}
	if len(req.EventIDs) > 10000 {
		s.ans.Fail(ctx, httpapi.InvalidArg("at most 10000 eventIds per call"))
		return
	}
	octx, cancel := s.callCtx(adminOpsTimeout)
	defer cancel()
	res, err := s.cfg.Ops.ReplayDLQ(octx, req.EventIDs, req.All, req.DropPoison)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	// Audited after the replay (it moved messages in RabbitMQ): a failed
	// audit answers 503; replaying the same events again finds them no
	// longer dead and changes nothing but the audit.
	change := map[string]any{"eventIds": req.EventIDs, "all": req.All, "dropPoison": req.DropPoison, "result": res}
	if err := s.store.Audit(octx, c.UserID, persistence.ActionReplay, 0, change); err != nil {
		s.log.Error("dead letters replayed but not audited", append(httpapi.AdminAttrs(c), "eventIds", len(req.EventIDs), "all", req.All, "err", err)...)
		s.ans.Fail(ctx, err)
		return
	}
	s.log.Info("dead letters replayed", append(httpapi.AdminAttrs(c), "eventIds", len(req.EventIDs), "all", req.All)...)
	s.ans.JSON(ctx, fasthttp.StatusOK, res)
}

// adjustJSON is the answer of POST /api/admin/products/{id}/stock.
type adjustJSON struct {
	ProductID      int64  `json:"productId"`
	RepairNo       string `json:"repairNo"`
	Delta          int64  `json:"delta"`
	Applied        bool   `json:"applied"`        // false: this repairNo was applied before (a no-op replay)
	MySQLAvailable int64  `json:"mysqlAvailable"` // stock.available after the repair
	RedisAvailable int64  `json:"redisAvailable"` // shard 0's available after the repair
}

// adminAdjustStock is POST /api/admin/products/{id}/stock
//
//	{"delta": -3, "repairNo": "R-2026-11-29-1", "reason": "damaged units"}
//
// It repairs a product's stock by delta, once per repairNo: one MySQL
// transaction writes the (ADJUST, repairNo) flow and adds delta to
// stock.available, then adjust.lua adds delta to shard 0's Redis available,
// guarded by a per-repairNo marker. The same repairNo again answers 200 and
// changes nothing (applied false); with another delta 409 CONFLICT. 409
// INSUFFICIENT_STOCK if MySQL or Redis available would go below 0. 400
// INVALID_ARGUMENT (details field delta) when |delta| exceeds maxStock or the
// product's total after adjustments would exceed it (persistence.MaxUnits,
// 10^9 units). If Redis
// fails after the MySQL commit the answer is 503: sending the same request
// again is safe and completes the Redis half (the MySQL half is then a no-op);
// otherwise the sweeper applies it (pipeline.RepairAdjustments).
func (s *API) adminAdjustStock(ctx *fasthttp.RequestCtx, c auth.Claims) {
	pid, ok := httpapi.ParseID(ctx.UserValue("id").(string))
	if !ok {
		s.ans.Fail(ctx, httpapi.ErrProductNotFound)
		return
	}
	a, aerr := s.decodeAdjustment(ctx)
	if aerr != nil {
		s.ans.Fail(ctx, aerr)
		return
	}
	res, err := s.adjustMySQL(c, pid, a)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	redisAvail, err := s.adjustRedis(c, pid, a)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	s.products.Invalidate()
	s.log.Info("stock repaired", append(httpapi.AdminAttrs(c), "productId", pid, "repairNo", a.repairNo, "delta", a.delta, "applied", res.Applied,
		"reason", a.reason)...)
	s.ans.JSON(ctx, fasthttp.StatusOK, adjustJSON{ProductID: pid, RepairNo: a.repairNo, Delta: a.delta,
		Applied: res.Applied, MySQLAvailable: res.Available, RedisAvailable: redisAvail})
}

// stockAdjustment is a decoded, validated POST …/stock body.
type stockAdjustment struct {
	delta            int64
	repairNo, reason string
}

// decodeAdjustment reads and validates the body: 400 INVALID_ARGUMENT.
func (s *API) decodeAdjustment(ctx *fasthttp.RequestCtx) (stockAdjustment, *httpapi.APIError) {
	var (
		a         stockAdjustment
		hasReason bool
	)
	fields := [...]httpapi.Field{
		httpapi.IntField("delta", &a.delta),
		httpapi.StringField("repairNo", &a.repairNo),
		httpapi.Optional(httpapi.StringField("reason", &a.reason), &hasReason),
	}
	if err := httpapi.DecodeBody(ctx.PostBody(), s.cfg.MaxBodyBytes, fields[:]); err != nil {
		return a, err
	}
	switch {
	case a.delta == 0:
		return a, httpapi.InvalidArg("delta must not be 0")
	case a.delta < -maxStock || a.delta > maxStock:
		return a, httpapi.InvalidFields([]httpapi.FieldError{{Field: "delta", Message: fmt.Sprintf("delta must be from -%d to %d units (not 0)", maxStock, maxStock)}})
	case !order.ValidRequestID(a.repairNo):
		return a, httpapi.InvalidArg("repairNo must be 1–64 characters of [A-Za-z0-9._:-]")
	case len(a.reason) > 200:
		return a, httpapi.InvalidArg("reason must be at most 200 bytes")
	}
	return a, nil
}

// adjustMySQL is the MySQL half of the repair (persistence.AdjustStockBy),
// its errors as the API answers them.
func (s *API) adjustMySQL(c auth.Claims, pid int64, a stockAdjustment) (persistence.AdjustResult, error) {
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	res, err := s.store.AdjustStockBy(sctx, c.UserID, pid, a.repairNo, a.delta, a.reason)
	cancel()
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, persistence.ErrNotFound):
		return res, httpapi.ErrProductNotFound
	case errors.Is(err, persistence.ErrConflict):
		return res, &httpapi.APIError{Status: fasthttp.StatusConflict, Code: httpapi.CodeConflict,
			Message: "repairNo was already used with a different delta or product"}
	case errors.Is(err, persistence.ErrTooManyUnits):
		return res, httpapi.InvalidFields([]httpapi.FieldError{{Field: "delta", Message: fmt.Sprintf(
			"the adjustment would make the product's total (units after adjustments) exceed %d", maxStock)}})
	case errors.Is(err, persistence.ErrNegativeStock):
		return res, &httpapi.APIError{Status: fasthttp.StatusConflict, Code: httpapi.CodeInsufficientStock,
			Message: "the adjustment would make MySQL available stock negative"}
	}
	return res, err
}

// adjustRedis is the Redis half (adjust.lua on shard 0), after the MySQL
// commit: shard 0's available after it; failures logged with the admin c.
func (s *API) adjustRedis(c auth.Claims, pid int64, a stockAdjustment) (int64, error) {
	var redisAvail int64
	err := s.redisCall(func(ctx context.Context) error {
		var err error
		_, redisAvail, err = lua.ApplyAdjustment(ctx, s.rdb, pid, a.repairNo, a.delta)
		return err
	})
	if errors.Is(err, lua.ErrNegativeAdjust) {
		s.log.Error("stock repair applied in MySQL but Redis shard 0 has too little available", append(httpapi.AdminAttrs(c), "productId", pid,
			"repairNo", a.repairNo, "delta", a.delta, "redisAvailable", redisAvail)...)
		return redisAvail, &httpapi.APIError{Status: fasthttp.StatusConflict, Code: httpapi.CodeInsufficientStock,
			Message: "applied in MySQL, but Redis shard 0 has too little available stock; reconcile shows the drift"}
	}
	if err != nil {
		s.log.Error("stock repair applied in MySQL but not in Redis; send it again", append(httpapi.AdminAttrs(c), "productId", pid,
			"repairNo", a.repairNo, "err", err)...)
		return redisAvail, err
	}
	return redisAvail, nil
}
