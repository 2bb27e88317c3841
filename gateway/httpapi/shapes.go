package httpapi

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// The API shapes of a product and an order, answered to buyers and to
// operators alike.

// ProductJSON is the API shape of a product (docs/spec.md §3). available is the sum
// of the Redis counts of the product's stock shards; total is the units the
// sale started with plus every stock adjustment since (so available ≤ total);
// saleEnd is null for a sale open until sold out.
type ProductJSON struct {
	ID           int64      `json:"id"`
	Name         string     `json:"name"`
	Price        int64      `json:"price"`
	Total        int64      `json:"total"`
	Available    int64      `json:"available"`
	SaleStart    time.Time  `json:"saleStart"`
	SaleEnd      *time.Time `json:"saleEnd"`
	PerUserLimit int64      `json:"perUserLimit"` // 0 = no limit
	MaxPerOrder  int64      `json:"maxPerOrder"`  // largest quantity of one order
	Shards       int        `json:"shards"`       // Redis stock shards (lua/shards.go)
	State        string     `json:"state"`        // SaleState
	Paused       bool       `json:"paused"`       // an admin paused the sale (sale_admin.go)
	SoldOut      bool       `json:"soldOut"`
	ImageURL     string     `json:"imageUrl,omitempty"`    // absolute http(s) URL; absent = none
	Description  string     `json:"description,omitempty"` // plain text; absent = none
	// WaitingRoom: buyers take a place in line first (waitingroom.go).
	WaitingRoom bool `json:"waitingRoom"`
}

// Sale states of the product JSON's state.
const (
	StateUpcoming = "upcoming" // before saleStart
	StateLive     = "live"     // in the window, not paused, stock left
	StatePaused   = "paused"   // in (or before) the window, paused by an admin
	StateEnded    = "ended"    // at or after saleEnd (ended by an admin: saleEnd = that time)
	StateSoldOut  = "soldOut"  // in the window, nothing available
)

// SaleState is p's state at now with available units left: ended first,
// then paused, upcoming, soldOut, live.
func SaleState(p persistence.Product, available int64, now time.Time) string {
	switch {
	case !now.Before(p.SaleEnd):
		return StateEnded
	case p.Paused:
		return StatePaused
	case now.Before(p.SaleStart):
		return StateUpcoming
	case available <= 0:
		return StateSoldOut
	}
	return StateLive
}

func ToProductJSON(p persistence.Product, available int64) ProductJSON {
	pj := ProductJSON{
		ID: p.ID, Name: p.Name, Price: p.Price, Total: p.Units(), Available: available,
		SaleStart: p.SaleStart.UTC(), PerUserLimit: p.PerUserLimit, MaxPerOrder: p.MaxPerOrder,
		Shards: max(p.Shards, 1), State: SaleState(p, available, time.Now()), Paused: p.Paused,
		SoldOut: available <= 0, ImageURL: p.ImageURL, Description: p.Description,
	}
	if !p.OpenEnded() {
		end := p.SaleEnd.UTC()
		pj.SaleEnd = &end
	}
	return pj
}

// OrderJSON is the API shape of an order (docs/spec.md §3). Times are RFC 3339 UTC;
// payDeadline is null until the order waits for payment.
type OrderJSON struct {
	OrderNo     string       `json:"orderNo"`
	RequestID   string       `json:"requestId"`
	ProductID   int64        `json:"productId"`
	Quantity    int64        `json:"quantity"`
	Amount      int64        `json:"amount"`
	Status      order.Status `json:"status"`
	Version     int64        `json:"version"`
	CreatedAt   time.Time    `json:"createdAt"`
	UpdatedAt   time.Time    `json:"updatedAt"`
	PayDeadline *time.Time   `json:"payDeadline"`
}

func ToOrderJSON(o persistence.Order) OrderJSON {
	j := OrderJSON{
		OrderNo: o.OrderNo, RequestID: o.RequestID, ProductID: o.ProductID, Quantity: o.Quantity,
		Amount: o.Amount, Status: o.Status, Version: o.Version,
		CreatedAt: o.CreatedAt.UTC(), UpdatedAt: o.UpdatedAt.UTC(),
	}
	if o.PayDeadline != nil {
		t := o.PayDeadline.UTC()
		j.PayDeadline = &t
	}
	return j
}

// OrderNoParam returns the {orderNo} of the path, or "" when it is not a
// well-formed orderNo (which answers 404: no such order can exist).
func OrderNoParam(ctx *fasthttp.RequestCtx) string {
	no, _ := ctx.UserValue("orderNo").(string)
	if _, _, _, err := order.ParseNo(no); err != nil {
		return ""
	}
	return no
}
