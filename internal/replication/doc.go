// Package replication runs replicated shards (--replicas,
// docs/REPLICATION.md): the goroutines, connections and clocks around the
// protocol core, package replica, in the shape of hashicorp/raft.
//
// The parts, from the bottom:
//
//   - Host runs one ps's replica.Node (a deterministic state machine that
//     decides who holds, logs and serves each shard): it ticks the node on
//     a real clock, carries its messages to the other ps over TCP (or
//     memnet in tests), hands the log's entries out in order and blocks a
//     push until every live copy holds it. Entries are opaque bytes to it.
//   - FSM is what a copy of a shard is to the log: Apply an entry,
//     Snapshot the copy for a ps that rejoins, Restore one. server.FSM
//     implements it; the entries are the shard's own requests, encoded by
//     package server (server.EncodeEntry, EncodeAggregate, EncodeTouch).
//   - A copy of a shard (shardCopy) serves the ParamServer service and the
//     binary data path at its own address, sends Init, Push, Done, Restore
//     and the pulls that change tables through the Host, applies the
//     entries to its FSM on a goroutine of its own (applier), and answers
//     reads only where it is the primary.
//   - RunPS is one ps of a replicated job (PSConfig): its own shard and a
//     copy of each of the Replicas-1 shards before it, the Host, the
//     listeners, what a re-formation, a takeover and a rejoin do to the
//     copies.
//   - WorkerConfig is a worker's side: a dialler that fails over to a
//     shard's copies (Dialer) and a step sent again, with the same request
//     id, while they take over (ResendAfterFailover).
//
// Options are the flags both sides share. The trainer starts RunPS for a
// ps with --replicas > 1 and uses WorkerConfig in its loops; nothing of
// this package runs with --replicas=1.
package replication
