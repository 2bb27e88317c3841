package order

import "fmt"

// Status is the state of an order, stored in order_info.status.
type Status string

// Order statuses (docs/spec.md §2).
const (
	Processing Status = "PROCESSING"  // accepted by the gateway, stock reserved in Redis
	WaitingPay Status = "WAITING_PAY" // stock locked in MySQL, waiting for payment until pay_deadline
	Paid       Status = "PAID"        // terminal: locked stock became sold
	Cancelled  Status = "CANCELLED"   // terminal: by the user or the pay timeout; stock released once
	Failed     Status = "FAILED"      // terminal: MySQL stock could not be locked; Redis reservation released once
)

// transitions lists the allowed moves; everything else is refused.
var transitions = map[Status][]Status{
	Processing: {WaitingPay, Failed, Cancelled},
	WaitingPay: {Paid, Cancelled},
}

// Valid reports whether s is one of the five statuses.
func (s Status) Valid() bool {
	switch s {
	case Processing, WaitingPay, Paid, Cancelled, Failed:
		return true
	}
	return false
}

// Terminal reports whether no transition leaves s.
func (s Status) Terminal() bool { return s == Paid || s == Cancelled || s == Failed }

// Live reports whether an order in status s holds stock: PROCESSING,
// WAITING_PAY and PAID count against Redis available (docs/spec.md §5.2).
func (s Status) Live() bool { return s == Processing || s == WaitingPay || s == Paid }

// ReleasesStock reports whether entering s gives the order's stock back.
func (s Status) ReleasesStock() bool { return s == Cancelled || s == Failed }

// CanTransition reports whether from → to is an allowed transition.
func CanTransition(from, to Status) bool {
	for _, t := range transitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// ParseStatus returns the Status named s or an error.
func ParseStatus(s string) (Status, error) {
	st := Status(s)
	if !st.Valid() {
		return "", fmt.Errorf("order: unknown status %q", s)
	}
	return st, nil
}

// Statuses lists every status in lifecycle order.
var Statuses = []Status{Processing, WaitingPay, Paid, Cancelled, Failed}

// FlowType is stock_flow.biz_type; (FlowType, biz_no) is unique, which is what
// makes lock, confirm, release and adjust happen at most once.
type FlowType string

// Stock flow types (docs/spec.md §4).
const (
	FlowLock    FlowType = "LOCK"    // available → locked, biz_no = orderNo
	FlowConfirm FlowType = "CONFIRM" // locked → sold, biz_no = orderNo
	FlowRelease FlowType = "RELEASE" // locked (or nothing, if never locked) → available, biz_no = orderNo
	FlowAdjust  FlowType = "ADJUST"  // admin repair, biz_no = repairNo
)

// CloseReason says why an order was closed; stored in order_info.close_reason.
type CloseReason string

// Close reasons.
const (
	ReasonUser    CloseReason = "USER_CANCEL"
	ReasonTimeout CloseReason = "PAY_TIMEOUT"
	ReasonNoStock CloseReason = "STOCK_SHORT"
	ReasonRepair  CloseReason = "REPAIR"
)
