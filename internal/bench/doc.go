// Package bench measures the data path between workers and parameter
// servers, and checks that every update it sends was applied. It is the
// engine of `paramserv bench`.
//
// # What runs
//
// Each case (a variable or table layout) gets its own fresh set of ps,
// started by a StartFunc: as child processes of the paramserv binary
// (ProcessStarter, what `paramserv bench` uses: `paramserv train
// --job_name=ps`, on free loopback ports) or inside the calling process
// (InProcessStarter, for tests and Go benchmarks). The calling process is
// worker 0, the chief: it initialises the case's variables (optimizer sgd,
// learning rate 1, asynchronous mode) and, with more than one worker, runs
// workers 1..W-1 as goroutines, each with its own client, all doing the same
// operations at the same time.
//
// The workers' clients use the data path (docs/WIRE.md), or gRPC only with
// SessionConfig.GRPCOnly (`paramserv bench --grpc_only`), to compare.
//
// Cases:
//
//   - tiny: one dense variable of one float32; measures per-call overhead.
//   - dense: one dense variable of N bytes (N/4 float32, one dimension).
//     With more than one ps it is split across all of them (SplitBytes is 1
//     unless set), so a push moves every shard in parallel.
//   - sparse: one table of row width D; every operation touches the same
//     K distinct random keys (fixed seed), so after the warm-up every row
//     exists.
//
// Operations: push (gradients out, an acknowledgement back), pull (values
// back) and pushpull (both in one round trip). Each runs Warmup untimed
// repetitions and then Reps timed ones; all workers pass a barrier between
// the two phases, and at the end of the timed phase.
//
// # What is reported
//
// Per case and operation, from worker 0's timed repetitions: median, 90th
// percentile (linear interpolation between the closest ranks), min and max,
// in milliseconds.
//
// Payload bytes are the bytes an operation must move at the least: for a
// dense variable of N bytes, push N, pull N, pushpull 2N; for K sparse keys
// of width D, push K·8 + K·D·4 (keys and gradients), pull K·8 + K·D·4 (keys
// out, values back), pushpull K·8 + 2·K·D·4 (keys once, gradients out,
// values back). GB/s is payload bytes / median time, with GB = 10^9 bytes.
// keys/s is K / median time. With several workers the aggregate rate is all
// workers' timed payload bytes over the wall time of the timed phase.
//
// The baseline is a plain TCP exchange on loopback that moves the same
// payload bytes in the same directions with the same repetitions: the
// client writes the request bytes, the server reads them all and answers
// with the reply bytes (a push's reply is a one-byte acknowledgement, a
// pull's request one byte) from a buffer it has written (never-written
// memory reads as the kernel's zero page, always in cache).
// ratio_to_baseline is the operation's median over the baseline's median:
// how many times slower than the bare socket. With one worker the two are
// measured in turns, one operation and one baseline round trip per
// repetition (the baseline first in every other one), so that both see the
// same moments of a noisy machine; with several workers the baseline runs
// after the operations. `paramserv bench` runs the baseline server in a
// child process of its own (`paramserv bench --baseline_server`), as the ps
// are; the Go benchmarks run it on a goroutine, as they do the ps. The
// client side uses one connection, reusable buffers, io.ReadFull and Go's
// default TCP_NODELAY.
//
// When the ps and the baseline server are processes of their own and there
// is one worker, the CPU time each spent per timed repetition (summed over
// its threads' /proc schedstat) is reported too, and cpu_ratio_to_baseline,
// their ratio: on a machine shared with other work, CPU time moves much
// less than wall time, and on 2 cores it is what a ps costs the worker.
//
// # Verification
//
// Every gradient element is 1 and the rule is sgd with learning rate 1 from
// initial values 0, so each applied push subtracts exactly 1 (exact in
// float32 up to 2^24 pushes). After the operations of a case the chief pulls
// every value (dense) or every touched row (sparse) and checks that each
// element is exactly minus the number of pushes sent (warm-up, push and
// pushpull, all workers), and that every ps counted that many applied and no
// rejected or dropped pushes. Only then is a case verified.
//
// # Memory
//
// With MemOps > 0 a last case runs that many pushpulls of a dense variable
// and a sparse table together and reports the growth, from the end of the
// warm-up to the end, of each ps's resident set (VmRSS) and of this
// process's live heap: the goal is none.
package bench
