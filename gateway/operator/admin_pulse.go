package operator

import (
	"bytes"
	"context"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/httpapi"
)

// PulseReader is implemented by AdminOps that can read the operator
// console's live readings (pipeline.Ops): per sale cumulative order counts
// and units, the pipeline's backlog, the accepted → WAITING_PAY latency of
// the orders locked within window. The result must encode with encoding/json.
type PulseReader interface {
	Pulse(ctx context.Context, productIDs []int64, window time.Duration) (any, error)
}

// Bounds of GET /api/admin/pulse.
const (
	pulseMaxProducts   = 50
	pulseDefaultWindow = 10 * time.Second
	pulseMaxWindow     = 5 * time.Minute
	pulseRecentEnd     = time.Hour // by default, sales that ended less than this long ago are still read
	pulseTimeout       = 10 * time.Second
)

// adminPulse is GET /api/admin/pulse?products=1,2&window=10: what the
// operator console charts, read from Redis, MySQL and RabbitMQ (never from a
// process's /metrics). products: up to 50 ids; by default the newest 50
// sales that have not ended or ended within the last hour. window: the
// latency window in seconds, 1…300 (10). 200; 400; 403; 503 without Ops.
func (s *API) adminPulse(ctx *fasthttp.RequestCtx, _ auth.Claims) {
	pr, ok := s.cfg.Ops.(PulseReader)
	if !ok {
		s.ans.Fail(ctx, errNoOps)
		return
	}
	window := pulseDefaultWindow
	if v := ctx.QueryArgs().Peek("window"); v != nil {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || time.Duration(n)*time.Second > pulseMaxWindow {
			s.ans.Fail(ctx, httpapi.InvalidArg("window must be an integer number of seconds from 1 to %d", int(pulseMaxWindow.Seconds())))
			return
		}
		window = time.Duration(n) * time.Second
	}
	var ids []int64
	if v := ctx.QueryArgs().Peek("products"); v != nil {
		for _, part := range bytes.Split(v, []byte(",")) {
			id, ok := httpapi.ParseID(string(part))
			if !ok {
				s.ans.Fail(ctx, httpapi.InvalidArg("products must be a comma-separated list of product ids"))
				return
			}
			ids = append(ids, id)
		}
		if len(ids) > pulseMaxProducts {
			s.ans.Fail(ctx, httpapi.InvalidArg("at most %d products", pulseMaxProducts))
			return
		}
	} else {
		snap, err := s.products.Get(s.cfg.StoreTimeout)
		if err != nil {
			s.ans.Fail(ctx, err)
			return
		}
		cut := time.Now().Add(-pulseRecentEnd)
		for i := len(snap.List) - 1; i >= 0 && len(ids) < pulseMaxProducts; i-- {
			if snap.List[i].SaleEnd.After(cut) {
				ids = append(ids, snap.List[i].ID)
			}
		}
	}
	c, cancel := s.callCtx(pulseTimeout)
	defer cancel()
	rep, err := pr.Pulse(c, ids, window)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	s.ans.JSON(ctx, fasthttp.StatusOK, rep)
}
