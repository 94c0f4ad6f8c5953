// Package shard is one parameter server's share of the model as a
// thread-unsafe state machine, in the manner of etcd-io/raft's RawNode: the
// dense variables and sparse tables a ps holds, their optimizer state, the
// consistency tracker that decides which pushes count, the synchronous
// accumulators, and the incarnation that tells a restarted ps apart.
//
// A Shard has no goroutines, sockets, clocks or locks. Requests enter as
// plain values, time enters as an argument, and a large job (a
// checkpoint's sort, a restore's import, a big variable's update) is
// spread over the cores by the parallel.Runner and Update its caller puts
// in Config (the ps passes goroutines; by default one goroutine does it):
//
//	sh := shard.New(shard.Config{Task: 0, NumPS: 1, NumWorkers: 2})
//	err := sh.Init(layout, values)        // the chief's Init
//	p, err := sh.Check(push)              // every gradient checked before any is used
//	res, err := sh.Apply(p, now)          // tracker verdict, update or accumulate
//	sh.Tick(now)                          // the synchronous step timeout
//	cut := sh.Cut()                       // a copy for a checkpoint, under the lock
//	snap := cut.Shard()                   // sorted and encoded, after it
//	st, err := shard.Restore(...)         // built from files, outside any lock
//	sh.Install(st)                        // made the shard's state
//
// The ps process (package server) owns one Shard behind one mutex and is
// a thin shell: its gRPC service and its binary data path decode requests
// into the same Push type, call the same Check and Apply, and map the
// errors of this package, by Kind, to what its clients see in one place.
// So the same pushes give the same bytes of state however they were
// framed.
//
// Errors are of type *Error with a Kind saying what a caller can do about
// them: Invalid (a malformed request; nothing was applied and the shard
// serves on), NotReady (not initialised yet), Conflict (initialised with
// another layout), Behind (the shard has not reached the push's step: pull
// again), Failed (a synchronous step timed out and the job fails), Restored
// (the shard was restored while the request waited), CacheMiss (a data-path
// key set the connection no longer holds).
//
// Buffer ownership: a dense variable's value buffer may be lent to replies
// that are written after the caller's lock is released (Var.LeaseValues,
// Lease.Release); an update of a lent variable updates a copy (lease.go).
package shard
