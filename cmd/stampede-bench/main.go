// Command stampede-bench is the benchmark of Stampede: the stampede
// binary's commands (package app) plus the benchmark commands, so the
// production binary (cmd/stampede) does not link the load generator, while
// the benchmark runs the very code it measures, in process (bench) or as
// `stampede-bench serve` children (bench-scale, bench-push).
//
//	stampede-bench bench [--quick] [--scenarios …]  scenarios, report in bench/results
//	stampede-bench bench-scale                      1 and 2 gateway+writer pairs
//	stampede-bench bench-push [--line]              push fan-out, the waiting-room line
//
// docs/benchmarks.md and bench/README.md describe the scenarios and flags.
package main

import "github.com/stampede-sh/stampede/app"

func init() {
	app.Register("stampede-bench",
		app.Command{Name: "bench", Summary: "run the benchmark scenarios, write bench/results/<date>.{json,md}", Run: runBench},
		app.Command{Name: "bench-scale", Summary: "the benchmark against 1 and 2 gateway+writer pairs (separate processes), compared in one report", Run: runBenchScale},
		app.Command{Name: "bench-push", Summary: "10,000 WebSocket subscribers on one push process: delivery latency and memory per connection", Run: runBenchPush},
	)
}

func main() { app.Main() }
