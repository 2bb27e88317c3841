// Package loadgen is Stampede's open-model HTTP load generator.
//
// Requests arrive at a constant rate: request i is scheduled at t0 + i/rate
// whatever happened to the ones before it, and a bounded pool of workers
// sends them. Latency is measured from the scheduled time, not from the
// moment a worker got around to sending, so a server stall shows up in full
// in the percentiles instead of being hidden by a generator that waited
// politely for it ("coordinated omission", Gil Tene, "How NOT to Measure
// Latency", 2015; the same correction wrk2 makes). Requests that could not
// even start on time are counted (Late), and requests still unsent when the
// run's time is up are abandoned and counted, never silently dropped.
//
// Latencies go into HdrHistogram histograms (microseconds, 3 significant
// digits), one per outcome class ("202", "409 SOLD_OUT", "error", …), and a
// leading warm-up is excluded from every statistic. Throughput is measured
// answers per second over the measured window, which ends at the last
// answer: a server that falls behind stretches the window and lowers the
// figure.
//
// The generator only talks to loopback addresses, and every run is bounded
// in requests and in time. It uses fasthttp's HostClient, which costs little
// CPU: on the benchmark machine it shares two cores with Redis, RabbitMQ,
// MariaDB and every Stampede role.
package loadgen
