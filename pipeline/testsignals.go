package pipeline

import "github.com/stampede-sh/stampede/order"

// The test signals of the pipeline's components: callbacks at points where
// a test injects a fault (a process killed right after a commit, a handler
// that fails), kept out of the components' Config as river keeps its
// maintenance services' hooks (internal/maintenance, JobRescuerTestSignals).
// A test sets them on the component after New… and before Run; nothing
// else sets them, and in production they are zero: a nil signal does
// nothing.

// WriterTestSignals are Writer.TestSignals.
type WriterTestSignals struct {
	// AfterCommit, if set, runs after a batch's MySQL transaction committed
	// and before its entries are acknowledged, with the number of
	// reservations written (a writer killed right there).
	AfterCommit func(entries int)
}

// RelayTestSignals are Relay.TestSignals.
type RelayTestSignals struct {
	// AfterConfirm, if set, is called after the broker confirmed a batch and
	// before the acked rows are marked SENT, with their ids. A non-nil error
	// makes the relay behave as if its process died right there: it marks
	// nothing (the rows stay SENDING until their lease ends and are then
	// published again) and Run returns that error.
	AfterConfirm func(acked []int64) error
}

// ConsumerTestSignals are Consumer.TestSignals.
type ConsumerTestSignals struct {
	// BeforeHandle, if set, runs before each decoded message's handler with
	// the handler name, the event and the delivery attempt (1, 2, …). A
	// non-nil error replaces the handling: it counts as transient unless it
	// wraps ErrPoison.
	BeforeHandle func(handler string, ev order.Event, attempt int) error
	// AfterLockCommit, if set, runs after an order-lock batch committed and
	// before any of its messages is acknowledged, with the number of events
	// applied (a process killed right there).
	AfterLockCommit func(events int)
}
