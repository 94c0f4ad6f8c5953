// Package arch holds no code: its test keeps the layering that
// docs/ARCHITECTURE.md describes true of the code. The deterministic cores
// the page lists (and the leaf seams they are given: parallel, format and
// ckptformat) import no net, os or sync (atomics are allowed: they never block, and a
// core uses them to merge the results of pieces its caller's
// parallel.Runner runs at once, or for the reference counts of
// copy-on-write copies read on other goroutines), nor wire or checkpoint,
// nor parallel/goroutines; they read no clock (time.Now and the calls
// built on it) and start no goroutine. In server and client, gRPC is
// imported by one file, grpc.go: the rest speaks the shard's error kinds.
package arch
