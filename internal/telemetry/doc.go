// Package telemetry exposes what a task does to Prometheus: every ps and
// worker started with --metrics_addr=HOST:PORT serves its metrics at
// http://HOST:PORT/metrics in the text exposition format (and a status page
// at /).
//
// A ps's metrics (prefix paramserv_ps_) come from two places: the server's
// Observer hooks (PS implements server.Observer), which count and time
// every push, pull, rejected push, synchronous wait, checkpoint save and
// restore as it happens; and the shard's Status, read when Prometheus
// scrapes (global step, tables' rows and bytes, admissions and evictions,
// workers done and the age of each worker's last request). A worker's
// metrics (prefix paramserv_worker_) come from the training loop's
// Observer (Worker implements lifecycle.Observer): steps, examples, loss,
// compute and push+pull time, drops, checkpoints of the chief, recoveries,
// and the progress of its data loads (DataLoad, from the model's
// LoadProgress). A program with its own loop (package session) adds Calls:
// each call counted and timed with its bytes, its steps, the losses it
// reports. A ps's restores report their progress too (RestoreProgress).
// Both add the Go runtime's and the process's collectors (go_*,
// process_*: memory, CPU, file descriptors).
//
// Names follow Prometheus' conventions: base units in the name (_seconds,
// _bytes), counters end in _total, and labels name a dimension of one
// quantity (verdict, reason, kind, table, worker). Which task a series
// belongs to is the scrape target's business (its job and instance
// labels), not a label here.
package telemetry
