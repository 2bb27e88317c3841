package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// Check is one invariant's verdict.
type Check struct {
	Name   string `json:"name"`   // "1 stock never negative", …, numbered as docs/spec.md §5
	OK     bool   `json:"ok"`     //
	Detail string `json:"detail"` // the numbers behind the verdict
}

// ProductAudit is the reconciliation of one product: Redis against MySQL
// against the orders.
type ProductAudit struct {
	ProductID      int64                     `json:"productId"`
	Name           string                    `json:"name"`
	Total          int64                     `json:"total"`
	Adjust         int64                     `json:"adjust"`         // Σ ADJUST flows
	RedisAvailable int64                     `json:"redisAvailable"` // Σ over shards
	RedisShards    []int64                   `json:"redisShards"`
	MySQL          persistence.Stock         `json:"mysql"`
	Orders         map[order.Status][2]int64 `json:"orders"`        // status → {orders, units}
	IntakeBacklog  int64                     `json:"intakeBacklog"` // stream entries not yet acknowledged by a writer
	Drift          int64                     `json:"drift"`         // Redis available − (total + adjust − live units)
	Flows          persistence.FlowAudit     `json:"flows"`
	Checks         []Check                   `json:"checks"`
	// Error is set when the product could not be audited — its Redis data
	// is unusable (a non-integer available, a key of the wrong type) — and
	// says why; its one check "0 product data readable" fails, and the
	// other products are audited as usual.
	Error    string `json:"error,omitempty"`
	byStatus map[order.Status]persistence.StatusCount
	// The product's sale window (the sweeper's sale series: activeSales).
	saleStart, saleEnd time.Time
}

// Report is the reconciliation of every product plus the outbox.
type Report struct {
	At           time.Time        `json:"at"`
	Products     []ProductAudit   `json:"products"`
	Outbox       map[string]int64 `json:"outbox"` // status → rows, whole table
	OutboxOldest time.Duration    `json:"outboxOldestPending"`
	// OutboxPending is the audited scope's unpublished rows (NEW, RETRY,
	// SENDING): of the given products' orders, or of the whole table when
	// every product was audited.
	OutboxPending int64   `json:"outboxPending"`
	Checks        []Check `json:"checks"` // outbox and pipeline-wide checks
	OK            bool    `json:"ok"`     // every check passed
}

// Failed lists the names of the failed checks, prefixed by product id.
func (r Report) Failed() []string {
	var out []string
	for _, p := range r.Products {
		for _, c := range p.Checks {
			if !c.OK {
				out = append(out, fmt.Sprintf("product %d: %s (%s)", p.ProductID, c.Name, c.Detail))
			}
		}
	}
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c.Name+" ("+c.Detail+")")
		}
	}
	return out
}

// Reconcile checks the invariants of docs/spec.md §5 for the given products (nil =
// every product) against Redis and MySQL directly; invariant 6 (every
// outbox row SENT or DEAD) for the rows of those products' orders, or for
// the whole table. The checks of invariants
// 2, 3, 5 and 6 hold only once the pipeline is idle; callers that audit a
// running sale should wait for an idle pipeline first (see WaitIdle).
func Reconcile(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, productIDs []int64) (Report, error) {
	rep := Report{At: time.Now().UTC(), OK: true}
	products, err := store.ListProducts(ctx)
	if err != nil {
		return rep, err
	}
	want := map[int64]bool{}
	for _, id := range productIDs {
		want[id] = true
	}
	counts, err := store.CountOrders(ctx, 0)
	if err != nil {
		return rep, err
	}
	for _, p := range products {
		if len(want) > 0 && !want[p.ID] {
			continue
		}
		pa, err := auditProduct(ctx, rdb, store, p, counts)
		if err != nil {
			if !productFault(err) {
				return rep, err
			}
			// This product's data is at fault: report it, audit the others.
			pa = ProductAudit{ProductID: p.ID, Name: p.Name, Total: p.Total, Orders: pa.Orders, Error: err.Error(),
				Checks: []Check{{Name: "0 product data readable", OK: false, Detail: err.Error()}}}
		}
		pa.saleStart, pa.saleEnd = p.SaleStart, p.SaleEnd
		for _, c := range pa.Checks {
			rep.OK = rep.OK && c.OK
		}
		rep.Products = append(rep.Products, pa)
	}
	rep.Outbox, rep.OutboxOldest, err = store.OutboxCounts(ctx)
	if err != nil {
		return rep, err
	}
	all := rep.Outbox[persistence.OutboxNew] + rep.Outbox[persistence.OutboxRetry] + rep.Outbox[persistence.OutboxSending]
	rep.OutboxPending = all
	detail := fmt.Sprintf("SENT %d, DEAD %d, pending %d", rep.Outbox[persistence.OutboxSent], rep.Outbox[persistence.OutboxDead], all)
	if len(want) > 0 && all > 0 {
		// Only the audited products' events count: other products' traffic
		// (another sale, a sweeper closing old orders) is theirs.
		if rep.OutboxPending, err = store.PendingOutboxFor(ctx, productIDs); err != nil {
			return rep, err
		}
		detail = fmt.Sprintf("pending %d of these products' orders; whole table: %s", rep.OutboxPending, detail)
	}
	rep.Checks = append(rep.Checks, Check{
		Name:   "6 every outbox row SENT or DEAD",
		OK:     rep.OutboxPending == 0,
		Detail: detail,
	})
	rep.OK = rep.OK && rep.OutboxPending == 0
	return rep, nil
}

// productFault reports whether an audit error is about one product's data
// (unparseable or wrongly typed Redis values) rather than a service being
// unreachable, which fails the whole reconciliation.
func productFault(err error) bool {
	if errors.Is(err, lua.ErrStockCorrupt) {
		return true
	}
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return true
	}
	return strings.Contains(err.Error(), "WRONGTYPE")
}

func auditProduct(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, p persistence.Product, counts []persistence.StatusCount) (ProductAudit, error) {
	pa := ProductAudit{ProductID: p.ID, Name: p.Name, Total: p.Total, Orders: map[order.Status][2]int64{},
		byStatus: map[order.Status]persistence.StatusCount{}}
	for _, c := range counts {
		if c.ProductID == p.ID {
			pa.Orders[c.Status] = [2]int64{c.Orders, c.Units}
			pa.byStatus[c.Status] = c
		}
	}
	negative := false
	for shard := range max(p.Shards, 1) {
		k := lua.ShardKeys(p.ID, shard)
		a, err := rdb.HGet(ctx, k.Stock(), "available").Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return pa, fmt.Errorf("reconcile: redis available of %d/%d: %w", p.ID, shard, err)
		}
		pa.RedisShards = append(pa.RedisShards, a)
		pa.RedisAvailable += a
		negative = negative || a < 0
		backlog, err := intakeBacklog(ctx, rdb, k.Intake())
		if err != nil {
			return pa, err
		}
		pa.IntakeBacklog += backlog
	}
	var err error
	if pa.MySQL, err = store.GetStock(ctx, p.ID); err != nil {
		return pa, err
	}
	if pa.Flows, err = store.AuditFlows(ctx, p.ID); err != nil {
		return pa, err
	}
	pa.Adjust = pa.Flows.AdjustTotal
	units := func(s order.Status) int64 { return pa.byStatus[s].Units }
	live := units(order.Processing) + units(order.WaitingPay) + units(order.Paid)
	pa.Drift = pa.RedisAvailable - (p.Total + pa.Adjust - live)
	m := pa.MySQL
	f := pa.Flows
	pa.Checks = []Check{
		{Name: "1 stock never negative", OK: !negative && m.Available >= 0 && m.Locked >= 0,
			Detail: fmt.Sprintf("redis %v, mysql available %d locked %d", pa.RedisShards, m.Available, m.Locked)},
		{Name: "2 redis available = total - live orders (+ adjust)", OK: pa.Drift == 0 && pa.IntakeBacklog == 0,
			Detail: fmt.Sprintf("redis %d, total %d, adjust %d, live units %d, drift %d, intake backlog %d",
				pa.RedisAvailable, p.Total, pa.Adjust, live, pa.Drift, pa.IntakeBacklog)},
		{Name: "3 mysql locked = waiting, sold = paid, sum = total", OK: m.Locked == units(order.WaitingPay) && m.Sold == units(order.Paid) &&
			m.Available+m.Locked+m.Sold == p.Total+pa.Adjust,
			Detail: fmt.Sprintf("available %d locked %d (waiting %d) sold %d (paid %d), sum %d vs %d",
				m.Available, m.Locked, units(order.WaitingPay), m.Sold, units(order.Paid), m.Available+m.Locked+m.Sold, p.Total+pa.Adjust)},
		{Name: "4 one order per request, flows match statuses", OK: f.DuplicateRequests == 0 && f.MissingLock == 0 && f.MissingConfirm == 0 &&
			f.MissingRelease == 0 && f.UnexpectedRelease == 0 && f.UnexpectedConfirm == 0,
			Detail: fmt.Sprintf("duplicate requests %d, missing lock %d confirm %d release %d, unexpected release %d confirm %d",
				f.DuplicateRequests, f.MissingLock, f.MissingConfirm, f.MissingRelease, f.UnexpectedRelease, f.UnexpectedConfirm)},
		{Name: "5 every accepted order settled", OK: pa.byStatus[order.Processing].Orders == 0 && pa.IntakeBacklog == 0,
			Detail: fmt.Sprintf("PROCESSING %d, intake backlog %d", pa.byStatus[order.Processing].Orders, pa.IntakeBacklog)},
	}
	return pa, nil
}

// intakeBacklog is the number of entries of stream not yet acknowledged by
// its consumer group: pending plus not yet delivered (XINFO GROUPS lag), or
// the stream length when no group exists yet.
func intakeBacklog(ctx context.Context, rdb redis.UniversalClient, stream string) (int64, error) {
	groups, err := rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") || errors.Is(err, redis.Nil) {
			return 0, nil
		}
		return 0, fmt.Errorf("reconcile: xinfo groups %s: %w", stream, err)
	}
	if len(groups) == 0 {
		return rdb.XLen(ctx, stream).Result()
	}
	var n int64
	for _, g := range groups {
		lag := g.Lag
		if lag < 0 { // unknown after deletions: fall back to counting
			lag = 0
		}
		n += g.Pending + lag
	}
	if n == 0 {
		return 0, nil
	}
	// Writers delete what they acknowledged, so the stream holds at most
	// the backlog: its length bounds it. The group's lag counter can be
	// wrong on a replica promoted by a failover (its read counter lags the
	// primary's), and would then report a backlog that is not there.
	xlen, err := rdb.XLen(ctx, stream).Result()
	if err != nil {
		return 0, fmt.Errorf("reconcile: xlen %s: %w", stream, err)
	}
	return min(n, xlen), nil
}

// WaitIdle polls until no product has intake backlog, PROCESSING orders or
// Redis drift and nothing is left to publish, or ctx ends. It returns the
// last report. With productIDs, only the outbox rows of those products'
// orders count (other products' traffic — another sale, a sweeper closing
// old orders — does not hold it up); with none, every product and the whole
// outbox.
func WaitIdle(ctx context.Context, rdb redis.UniversalClient, store *persistence.Store, productIDs []int64, poll time.Duration) (Report, error) {
	for {
		rep, err := Reconcile(ctx, rdb, store, productIDs)
		if err == nil && idle(rep) {
			return rep, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("reconcile: pipeline not idle: %s", strings.Join(rep.Failed(), "; "))
			}
			return rep, err
		case <-time.After(poll):
		}
	}
}

// idle: no product has intake backlog, PROCESSING orders or drift, and the
// audited scope has nothing left to publish.
func idle(r Report) bool {
	for _, p := range r.Products {
		if p.Error != "" {
			return false
		}
		// Drift also waits for the release consumer to give back the Redis
		// reservations of orders that just became CANCELLED or FAILED.
		if p.IntakeBacklog > 0 || p.byStatus[order.Processing].Orders > 0 || p.Drift != 0 {
			return false
		}
	}
	return r.OutboxPending == 0
}
