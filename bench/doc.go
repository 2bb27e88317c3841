// Package bench is Stampede's benchmark suite: five scenarios run with the
// open-model load generator of package loadgen against a running gateway,
// each followed by the docs/spec.md §5 audit of its own product.
//
//   - spike: many distinct buyers for a few units at a high rate; time to
//     sell out, accepted and rejected latencies;
//   - sustained: a huge stock, the rate stepped up until p99 passes 50 ms or
//     errors appear; the highest clean step is the accepted intake;
//   - soldout: rejections per second once the product is sold out;
//   - duplicate: a fixed set of requestIds replayed many times; one order and
//     one orderNo per requestId;
//   - e2e: time from the 202 to WAITING_PAY (read back from MySQL) and the
//     pipeline's drain rate under load.
//
// Every scenario creates its product through the admin API and, after the
// load, waits for the pipeline to go idle (pipeline.WaitIdle) and reconciles
// Redis, MySQL and the orders (pipeline.Reconcile), adding checks of its own
// (accepted = stock, one orderNo per requestId, …). A scenario whose audit
// fails fails, whatever its speed. Run can repeat the scenarios against a
// second gateway (the synchronous-intake baseline) and measures the raw
// ceiling of the reserve script with redis-benchmark; Report renders JSON and
// a markdown table with the machine it ran on.
//
// bench never writes Redis or MySQL itself except the redis-benchmark
// ceiling's own keys (prefix "stampede-bench:", deleted afterwards); it only
// loads loopback addresses.
package bench
