// Package replica is the protocol core of replicated shards with hot
// failover (docs/REPLICATION.md), as a thread-unsafe state machine in the
// manner of etcd-io/raft's RawNode: one Node per ps, fed messages (Step),
// time (Tick) and workers' pushes (Propose), and asked what to do next
// (Ready: messages to send, log entries to apply to the local state, pushes
// now safe to acknowledge, shards taken over or lost). It has no
// goroutines, sockets, clocks or locks; the caller does the I/O and applies
// the entries to its own deterministic state machine (a shard.Shard).
//
// Placement is a ring: with N ps and R copies, shard s lives on ps s, s+1,
// …, s+R−1 (mod N), in order of succession. Membership only shrinks: a ps
// is removed once a majority of the N ps voted it out (each votes out a ps
// it has heard nothing from for Config.Timeout), and the view number is the
// number of removals. A primary applies, acknowledges and serves pulls only
// while it holds a lease granted by a majority; since a voter grants no
// lease after it votes and votes only once its last grant ran out, a
// primary cut off from the majority stops before anyone takes over.
//
// A push is an Entry of the shard's log, numbered by the primary and
// applied in order by every copy; it is acknowledged once every copy not
// removed holds it. Every push carries a request id (client, n); the last n
// applied per client is part of the replicated state, so a retry after a
// failover is recognised and not applied twice.
package replica

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Config is one ps's place in the replicated cluster.
type Config struct {
	ID      int           // this ps's index, 0..N-1
	N       int           // ps in the cluster
	R       int           // copies of each shard, 1..N
	Timeout time.Duration // nothing heard for this long: vote the ps out; also the lease's length
	// Boot names this process of the ps (the shell uses its start time):
	// a ps started again has another, so the others know it holds
	// nothing and readmit it as a new incarnation (docs/REPLICATION.md,
	// re-replication). 0 is taken as 1.
	Boot uint64
}

// Validate says what is wrong with c, or nil.
func (c Config) Validate() error {
	switch {
	case c.N < 1:
		return fmt.Errorf("replica: %d ps: want at least 1", c.N)
	case c.ID < 0 || c.ID >= c.N:
		return fmt.Errorf("replica: ps %d out of range 0..%d", c.ID, c.N-1)
	case c.R < 1 || c.R > c.N:
		return fmt.Errorf("replica: %d replicas with %d ps: want 1..%d (no two copies of a shard on one ps)", c.R, c.N, c.N)
	case c.Timeout <= 0:
		return fmt.Errorf("replica: failover timeout %v: want > 0", c.Timeout)
	}
	return nil
}

// Members are the ps holding shard s, primary first: the ring s, s+1, …
// s+R−1 (mod N).
func Members(s, n, r int) []int {
	m := make([]int, r)
	for i := range m {
		m[i] = (s + i) % n
	}
	return m
}

// Shards are the shards ps id holds a copy of, in ascending order.
func Shards(id, n, r int) []int {
	var out []int
	for s := 0; s < n; s++ {
		if slices.Contains(Members(s, n, r), id) {
			out = append(out, s)
		}
	}
	return out
}

// ReqID names a push: the client's n-th to this shard (n from 1).
type ReqID struct {
	Client int
	N      uint64
}

func (r ReqID) String() string { return fmt.Sprintf("%d:%d", r.Client, r.N) }

// Entry is one update in a shard's log: one push (Propose), or a
// synchronous step's aggregate covering the pushes it sums (ProposeHeld).
// Data is the caller's, opaque here and never modified.
type Entry struct {
	Shard int
	Seq   uint64
	Reqs  []ReqID
	Data  any
}

// MsgType is what a Message is.
type MsgType int

const (
	Heartbeat     MsgType = iota // lease request and liveness
	HeartbeatResp                // Grant: a lease until Sent+Timeout
	Append                       // primary → backup: Entries, Commit
	AppendResp                   // backup → primary: Seq held
	SyncReq                      // new primary → copy: entries after Seq?
	SyncResp                     // copy → new primary: Seq held, Entries after the asked Seq; Grant: a full copy
	Snapshot                     // primary → rejoining copy: the shard's state at Seq (one entry)
)

var msgNames = [...]string{"heartbeat", "heartbeat-resp", "append", "append-resp", "sync", "sync-resp", "snapshot"}

func (t MsgType) String() string { return msgNames[t] }

// Message is what one ps sends another. Every message carries the
// sender's membership (each ps's incarnation, which are removed) and
// votes, so membership spreads with any traffic.
type Message struct {
	Type     MsgType
	From, To int
	Removed  []int // ps whose incarnation (Gens) the sender knows removed
	Votes    []int // ps the sender votes out (their incarnation in Gens)
	Boot     uint64
	Epoch    uint64   // the cluster's re-formations (checkpoint fallback): a later one re-forms a receiver that agrees (reformAgreed)
	Gens     []uint64 // each ps's incarnation as the sender knows it (none: all 0)
	Boots    []uint64 // the process each incarnation is, where known (0: not known)
	Admits   []Admit  // removed ps the sender votes to readmit as their next incarnation
	Sent     time.Time
	Grant    bool // HeartbeatResp: a lease; Append: the backup counts; SyncResp: a full copy
	Shard    int
	Seq      uint64
	Commit   uint64
	Entries  []Entry
}

// Admit is a vote to readmit a removed ps as its next incarnation, the
// process Boot.
type Admit struct {
	PS   int
	Boot uint64
}

// SnapshotReq asks the caller for its copy of Shard as it is now (at Seq,
// after Ready's Apply), to pass to SendSnapshot for ps To.
type SnapshotReq struct {
	Shard, To int
	Seq       uint64
}

// Reform is a re-formation of the cluster from the processes up now, when
// the old membership cannot go on: a majority of the ps died at once (no
// removal can be voted), or every copy of a shard is lost. Every ps's
// copies then fall back to the newest checkpoint, as a cluster without
// replicas does. Lost and Dead are known only to the ps that started it
// (empty elsewhere).
type Reform struct {
	Epoch uint64
	By    int
	Lost  []int // shards whose every copy died
	Dead  []int // ps whose old process died
}

// CaughtUp is a shard this rejoining ps now holds a full copy of again:
// its primary From counts it.
type CaughtUp struct {
	Shard, From int
	Seq         uint64
}

// Ack is a push now held by every live copy: the worker may be answered.
type Ack struct {
	Shard int
	Req   ReqID
	Seq   uint64
}

// Ready is what the caller must do next: send Messages, apply Apply to
// its state in order (before answering anything), answer the Acked
// pushes, and report TookOver (shards this ps now serves as primary, after
// applying Apply) and Lost (shards with no copy left: checkpoint recovery).
type Ready struct {
	Messages  []Message
	Install   []Entry // rejoining: replace the copy of Shard by Data, the state at Seq (before Apply)
	Apply     []Entry
	Acked     []Ack
	TookOver  []int
	Lost      []int
	Snapshots []SnapshotReq // copies to send to rejoining ps (SendSnapshot), after Apply
	CaughtUp  []CaughtUp
	Joining   bool     // this process learnt it is not the member its peers know: it holds nothing and asks to be readmitted
	Reformed  *Reform  // the cluster re-formed: every copy falls back to the newest checkpoint
	Admitted  bool     // this process was readmitted (as Gen())
	Events    []string // what happened, for the log
}

// Errors of Propose.
var (
	ErrNotPrimary = errors.New("replica: not the primary")
	ErrNoLease    = errors.New("replica: no lease (no majority heard within the timeout)")
	ErrCatchingUp = errors.New("replica: taking over, catching up with the other copies")
	ErrLost       = errors.New("replica: every copy of the shard is lost")
	ErrRemoved    = errors.New("replica: this ps was removed from the cluster")
	ErrReformed   = errors.New("replica: the cluster re-formed from the newest checkpoint (every copy of a shard was lost)")
)

// NotPrimaryError says who this ps believes is the primary.
type NotPrimaryError struct {
	Shard, Primary int // Primary -1 if none is left
}

func (e *NotPrimaryError) Error() string {
	return fmt.Sprintf("replica: shard %d: this ps is not its primary (ps %d is)", e.Shard, e.Primary)
}
func (e *NotPrimaryError) Unwrap() error { return ErrNotPrimary }

type reqState struct {
	n   uint64
	seq uint64
}

// shardState is this ps's copy of one shard.
type shardState struct {
	id      int
	members []int
	log     []Entry // entries after trimmed, kept until every live copy holds them
	applied uint64  // last entry applied here
	commit  uint64  // every live copy holds the entries up to here
	lastReq map[int]reqState

	// As primary.
	primary  bool           // serving (caught up)
	catching map[int]bool   // copies a takeover waits for
	match    map[int]uint64 // per backup: entries it holds
	beatAt   map[int]uint64 // per backup: match at the last heartbeat
	pending  []Ack          // proposed here, not yet acknowledged (Seq 0: held)
	held     map[ReqID]bool // pushes applied here, waiting for their step's aggregate
	lost     bool
	joiners  map[int]*joiner // as primary: copies rejoining, not counted yet

	// As a copy: in is true while its primary counts it (a full copy);
	// a rejoining ps holds nothing until a snapshot is installed.
	in, snapped bool
}

// joiner is a rejoining copy as its primary sees it.
type joiner struct {
	heard       bool      // it was heard as its new incarnation (it takes a snapshot)
	asked, sent bool      // a snapshot was asked of the caller, sent
	snap        uint64    // the seq of the snapshot sent
	sentAt      time.Time // when
	held        bool      // the copy said it installed it
	// cutting: the caller took its copy at seq cutAt (ReserveSnapshot)
	// and builds it with no lock held; the log keeps what follows cutAt.
	cutting bool
	cutAt   uint64
	cutReqs []ReqID // the table of requests applied at cutAt
}

// Node is one ps's replication state. Not safe for concurrent use.
type Node struct {
	cfg                    Config
	now                    time.Time
	started                bool
	stopped                bool
	lastBeat               time.Time
	lastHeard              []time.Time
	grants                 []time.Time // per ps: Sent of the newest heartbeat it granted
	lapsed                 bool        // the lease ran out (logged once)
	removed                map[int]bool
	votes                  map[int]map[int]bool // votes[x][voter]
	shards                 map[int]*shardState
	lost                   map[int]bool // shards with every copy removed, reported
	dirty                  bool         // removed or votes changed since removedList, votesList
	removedList, votesList []int
	gensList, bootsList    []uint64
	admitsList             []Admit

	// Incarnations (re-replication). gen[x] is ps x's incarnation: a
	// removed ps comes back as the next one, once a majority votes to
	// admit that process (boot). Like removals, it only grows.
	boot    uint64
	myGen   uint64
	joining bool // this process is not (yet) a member: it asks to be admitted
	gen     []uint64
	bootOf  []uint64               // the process of gen[x], where known
	admits  map[int]map[int]uint64 // admits[x][voter] = the boot voted for as gen[x]+1

	// Re-formation (checkpoint fallback).
	epoch           uint64
	leasedOnce      bool        // this process held a lease: it is an established member (reformAgreed)
	strangerAt      []time.Time // per ps: when a process other than its member was last heard
	strangerBoot    []uint64
	noMajoritySince time.Time
	rd              Ready
}

// New returns the node of ps cfg.ID at the start of a job: nobody removed,
// no lease yet (the first Tick asks for one), every shard's log empty.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Boot == 0 {
		cfg.Boot = 1
	}
	n := &Node{
		cfg: cfg, lastHeard: make([]time.Time, cfg.N), grants: make([]time.Time, cfg.N),
		removed: map[int]bool{}, votes: map[int]map[int]bool{}, shards: map[int]*shardState{},
		lost: map[int]bool{}, lapsed: true, dirty: true,
		boot: cfg.Boot, gen: make([]uint64, cfg.N), bootOf: make([]uint64, cfg.N), admits: map[int]map[int]uint64{},
		strangerAt: make([]time.Time, cfg.N), strangerBoot: make([]uint64, cfg.N),
	}
	n.bootOf[cfg.ID] = cfg.Boot
	for _, s := range Shards(cfg.ID, cfg.N, cfg.R) {
		ss := &shardState{id: s, members: Members(s, cfg.N, cfg.R), lastReq: map[int]reqState{}, in: true, snapped: true}
		if ss.members[0] == cfg.ID {
			ss.primary, ss.match = true, map[int]uint64{}
		}
		n.shards[s] = ss
	}
	return n, nil
}

func (n *Node) majority() int { return n.cfg.N/2 + 1 }

// View counts the membership changes so far (removals, and two per
// readmission): it only grows.
func (n *Node) View() int {
	v := len(n.removed)
	for _, g := range n.gen {
		v += 2 * int(g)
	}
	return v
}

// Gen is ps id's incarnation as this ps knows it (0 at the start of a
// job, one more each time it is readmitted).
func (n *Node) Gen(id int) uint64 { return n.gen[id] }

// Epoch names the cluster's re-formations so far (0: none): every copy
// restored the newest checkpoint at each (Ready's Reformed).
func (n *Node) Epoch() uint64 { return n.epoch }

// Joining reports whether this process waits to be readmitted.
func (n *Node) Joining() bool { return n.joining }

// Removed reports whether ps id has been removed.
func (n *Node) Removed(id int) bool { return n.removed[id] }

// Stopped reports whether this ps learnt it was removed (it then does nothing).
func (n *Node) Stopped() bool { return n.stopped }

// Primary is the ps this node believes serves shard s, or -1 if every copy
// is removed. The order of succession is the ring's among the copies of
// the first incarnation, then the readmitted ones by incarnation and, in a
// tie, by process (Boot: the later started ranks later), so that a ps's
// return changes no primary.
func (n *Node) Primary(s int) int {
	best := -1
	for _, m := range Members(s, n.cfg.N, n.cfg.R) {
		if !n.removed[m] && (best < 0 || n.ranksBefore(m, best)) {
			best = m
		}
	}
	return best
}

// ranksBefore reports whether copy a comes before copy b in succession,
// both after the ring's first copy of a shard (Members order breaks ties).
func (n *Node) ranksBefore(a, b int) bool {
	if n.gen[a] != n.gen[b] {
		return n.gen[a] < n.gen[b]
	}
	return n.gen[a] > 0 && n.bootOf[a] < n.bootOf[b]
}

// LeaseUntil is when this ps's lease runs out: a margin of Timeout/8
// before the time the majority's grants run out.
func (n *Node) LeaseUntil() time.Time {
	times := make([]time.Time, 0, n.cfg.N)
	for id, g := range n.grants {
		if id == n.cfg.ID {
			g = n.now // its own grant is always fresh
		}
		times = append(times, g)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].After(times[j]) })
	k := times[n.majority()-1]
	if k.IsZero() {
		return time.Time{}
	}
	return k.Add(n.cfg.Timeout - n.cfg.Timeout/8)
}

func (n *Node) leased() bool { return n.cfg.N == 1 || n.now.Before(n.LeaseUntil()) }

// Serving reports whether this ps may answer pulls of shard s now: it is
// its caught-up primary, holds a lease, and every live copy holds all it
// applied. A pull never sees a push that is not yet acknowledgeable, so no
// later primary can answer with an older step.
func (n *Node) Serving(s int) bool {
	ss := n.shards[s]
	return !n.stopped && !n.joining && ss != nil && ss.primary && !ss.lost && n.leased() && ss.commit == ss.applied
}

// Proposable reports whether Propose would take a push for shard s now:
// this ps is its caught-up primary and holds a lease. Unlike Serving, it
// does not wait for earlier pushes to be held by every copy: pushes are
// logged one after the other while earlier ones are still on their way.
func (n *Node) Proposable(s int) bool {
	_, err := n.primaryOf(s, true)
	return err == nil
}

// Applied is the last entry of shard s applied here.
func (n *Node) Applied(s int) uint64 {
	if ss := n.shards[s]; ss != nil {
		return ss.applied
	}
	return 0
}

// Propose offers a worker's push to shard s. On success the entry is in
// Ready's Apply (to apply now) and its Ack comes in a later Ready, once
// every live copy holds it. A push already in the log (a retry) is not
// appended again: it is acknowledged when durable, with dup true.
func (n *Node) Propose(s int, req ReqID, data any) (seq uint64, dup bool, err error) {
	ss, err := n.primaryOf(s, true)
	if err != nil {
		return 0, false, err
	}
	if seq, ok := n.retry(ss, req); ok {
		return seq, true, nil
	}
	e := Entry{Shard: s, Seq: ss.applied + 1, Reqs: []ReqID{req}, Data: data}
	n.apply(ss, e, true)
	ss.pending = append(ss.pending, Ack{Shard: s, Req: req, Seq: e.Seq})
	n.ship(ss, e)
	return e.Seq, false, nil
}

// Hold is Propose for a push of a synchronous step replicated by
// aggregate: the caller applied it to its state already, and it goes into
// the log with its step's aggregate (ProposeHeld). Its Ack comes once that
// entry is held by every live copy. A retry of a push held or logged is
// recognised (dup true): the caller must not apply it again.
func (n *Node) Hold(s int, req ReqID) (dup bool, err error) {
	ss, err := n.primaryOf(s, true)
	if err != nil {
		return false, err
	}
	if _, ok := n.retry(ss, req); ok {
		return true, nil
	}
	if ss.held == nil {
		ss.held = map[ReqID]bool{}
	}
	dup = ss.held[req]
	ss.held[req] = true
	ss.pending = append(ss.pending, Ack{Shard: s, Req: req})
	return dup, nil
}

// ProposeHeld logs a synchronous step's aggregate, data, covering every
// push held since the last one, and ships it to the backups. It is not in
// Ready's Apply here: the caller's state holds it already. It needs no
// lease (the caller applied the step already; acknowledgements still wait
// for one), only that this ps is still the shard's primary.
func (n *Node) ProposeHeld(s int, data any) (seq uint64, err error) {
	ss, err := n.primaryOf(s, false)
	if err != nil {
		return 0, err
	}
	reqs := make([]ReqID, 0, len(ss.held))
	for r := range ss.held {
		reqs = append(reqs, r)
	}
	slices.SortFunc(reqs, func(a, b ReqID) int {
		if c := cmp.Compare(a.Client, b.Client); c != 0 {
			return c
		}
		return cmp.Compare(a.N, b.N)
	})
	e := Entry{Shard: s, Seq: ss.applied + 1, Reqs: reqs, Data: data}
	n.apply(ss, e, false)
	for i, a := range ss.pending {
		if a.Seq == 0 && ss.held[a.Req] {
			ss.pending[i].Seq = e.Seq
		}
	}
	ss.held = nil
	n.ship(ss, e)
	return e.Seq, nil
}

// primaryOf is shard s if this ps may take pushes for it now; without
// lease, whether it is its primary, lease or not.
func (n *Node) primaryOf(s int, lease bool) (*shardState, error) {
	ss := n.shards[s]
	switch {
	case n.stopped:
		return nil, ErrRemoved
	case n.joining:
		return nil, &NotPrimaryError{Shard: s, Primary: n.Primary(s)}
	case n.lost[s]:
		return nil, ErrLost
	case ss == nil:
		return nil, &NotPrimaryError{Shard: s, Primary: n.Primary(s)}
	case ss.lost:
		return nil, ErrLost
	case ss.catching != nil:
		return nil, ErrCatchingUp
	case !ss.primary:
		return nil, &NotPrimaryError{Shard: s, Primary: n.Primary(s)}
	case lease && !n.leased():
		return nil, ErrNoLease
	}
	return ss, nil
}

// retry recognises a push already in the log: its Ack comes once the
// entry holding it is durable.
func (n *Node) retry(ss *shardState, req ReqID) (uint64, bool) {
	last, ok := ss.lastReq[req.Client]
	if !ok || req.N > last.n {
		return 0, false
	}
	ss.pending = append(ss.pending, Ack{Shard: ss.id, Req: req, Seq: last.seq})
	n.advance(ss)
	return last.seq, true
}

func (n *Node) ship(ss *shardState, e Entry) {
	for _, b := range n.backups(ss) {
		if j := ss.joiners[b]; j != nil && j.snap == 0 {
			continue // it takes nothing before its snapshot
		}
		n.send(Message{Type: Append, To: b, Shard: ss.id, Entries: []Entry{e}, Commit: ss.commit, Grant: ss.joiners[b] == nil})
	}
	n.advance(ss)
}

// apply appends e to ss's log; out says the caller's state must apply it.
func (n *Node) apply(ss *shardState, e Entry, out bool) {
	ss.log = append(ss.log, e)
	ss.applied = e.Seq
	for _, r := range e.Reqs {
		if r.N > ss.lastReq[r.Client].n {
			ss.lastReq[r.Client] = reqState{n: r.N, seq: e.Seq}
		}
	}
	if out {
		n.rd.Apply = append(n.rd.Apply, e)
	}
}

// backups are the copies of ss other than this ps not removed.
func (n *Node) backups(ss *shardState) []int {
	var out []int
	for _, m := range ss.members {
		if m != n.cfg.ID && !n.removed[m] {
			out = append(out, m)
		}
	}
	return out
}

// advance moves a primary's commit to what every live copy holds and
// acknowledges what it covers (while leased).
func (n *Node) advance(ss *shardState) {
	if !ss.primary {
		return
	}
	c := ss.applied
	for _, b := range n.backups(ss) {
		if ss.joiners[b] == nil {
			c = min(c, ss.match[b])
		}
	}
	if c > ss.commit {
		ss.commit = c
		n.trim(ss)
	}
	n.askSnapshots(ss)
	if !n.leased() {
		return
	}
	keep := ss.pending[:0]
	for _, a := range ss.pending {
		if a.Seq != 0 && a.Seq <= ss.commit {
			n.rd.Acked = append(n.rd.Acked, a)
			continue
		}
		keep = append(keep, a)
	}
	ss.pending = keep
}

func (n *Node) trim(ss *shardState) {
	keep := ss.commit // a rejoining copy still needs what follows its snapshot
	for b, j := range ss.joiners {
		if j.sent {
			keep = min(keep, max(j.snap, ss.match[b]))
		}
		if j.cutting {
			keep = min(keep, j.cutAt)
		}
	}
	i := 0
	for i < len(ss.log) && ss.log[i].Seq <= keep {
		i++
	}
	ss.log = slices.Delete(ss.log, 0, i)
}

func (n *Node) send(m Message) {
	m.From, m.Boot, m.Epoch = n.cfg.ID, n.boot, n.epoch
	if n.dirty { // shared by the messages until membership changes, never modified
		n.removedList, n.votesList, n.dirty = sortedKeys(n.removed), n.myVotes(), false
		n.gensList, n.bootsList, n.admitsList = nil, nil, nil
		if n.View() > len(n.removed) || n.joining {
			n.gensList = slices.Clone(n.gen)
		}
		for x, b := range n.bootOf {
			if b != 0 && (x != n.cfg.ID || !n.joining) {
				n.bootsList = slices.Clone(n.bootOf)
				if n.joining {
					n.bootsList[n.cfg.ID] = 0
				}
				break
			}
		}
		for _, x := range sortedKeys(n.removed) {
			if b := n.admits[x][n.cfg.ID]; b != 0 {
				n.admitsList = append(n.admitsList, Admit{PS: x, Boot: b})
			}
		}
	}
	if n.joining { // a process not admitted votes nothing
		m.Removed, m.Gens = n.removedList, n.gensList
	} else {
		m.Removed, m.Votes, m.Gens, m.Boots, m.Admits = n.removedList, n.votesList, n.gensList, n.bootsList, n.admitsList
	}
	n.rd.Messages = append(n.rd.Messages, m)
}

func (n *Node) myVotes() []int {
	var out []int
	for x, v := range n.votes {
		if v[n.cfg.ID] {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}

func sortedKeys(m map[int]bool) []int {
	var out []int
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Tick moves the clock: heartbeats every Timeout/4 (with entries and
// catch-up requests sent again to copies that lag), votes against ps
// unheard for Timeout, and acknowledgements held back while the lease was
// lapsed.
func (n *Node) Tick(now time.Time) {
	if n.stopped {
		return
	}
	if !n.started {
		n.started = true
		for i := range n.lastHeard {
			n.lastHeard[i] = now
		}
		n.lastBeat = now.Add(-n.cfg.Timeout)
	}
	if now.After(n.now) {
		n.now = now
	}
	if n.joining { // not a member: it only asks to be readmitted
		if n.now.Sub(n.lastBeat) >= n.cfg.Timeout/4 {
			n.lastBeat = n.now
			for id := 0; id < n.cfg.N; id++ {
				if id != n.cfg.ID {
					n.send(Message{Type: Heartbeat, To: id, Sent: n.now})
				}
			}
		}
		return
	}
	// A ps votes only while it hears a majority (itself included): one
	// cut off from the rest would vote everyone out, and after a blip of
	// the whole network every ps would have voted against every other.
	heard := 1
	for id := 0; id < n.cfg.N; id++ {
		if id != n.cfg.ID && !n.removed[id] && n.now.Sub(n.lastHeard[id]) < n.cfg.Timeout {
			heard++
		}
	}
	if heard >= n.majority() {
		n.noMajoritySince = time.Time{}
	} else if n.noMajoritySince.IsZero() {
		n.noMajoritySince = n.now
	}
	if (len(n.lost) > 0 || (!n.noMajoritySince.IsZero() && n.now.Sub(n.noMajoritySince) >= 2*n.cfg.Timeout)) && n.allUp() {
		n.startReform()
		return
	}
	for id := 0; id < n.cfg.N && heard >= n.majority(); id++ {
		if id == n.cfg.ID || n.removed[id] || n.votes[id][n.cfg.ID] {
			continue
		}
		if n.now.Sub(n.lastHeard[id]) >= n.cfg.Timeout {
			n.event("ps %d votes ps %d out: nothing heard for %v", n.cfg.ID, id, n.now.Sub(n.lastHeard[id]))
			n.vote(id, n.cfg.ID)
			n.lastBeat = time.Time{} // tell the others at once
		}
	}
	if n.stopped {
		return
	}
	if n.now.Sub(n.lastBeat) >= n.cfg.Timeout/4 {
		n.lastBeat = n.now
		n.beat()
	}
	lapsed := !n.leased()
	n.leasedOnce = n.leasedOnce || !lapsed
	if lapsed && !n.lapsed && n.primaryOfAny() {
		n.event("ps %d: lease lapsed (no majority heard): not acknowledging", n.cfg.ID)
	}
	n.lapsed = lapsed
	for _, s := range n.shardIDs() {
		n.advance(n.shards[s])
	}
}

// allUp reports whether every other ps is heard: its member, or a process
// started again in its place.
func (n *Node) allUp() bool {
	for id := 0; id < n.cfg.N; id++ {
		if id != n.cfg.ID && n.now.Sub(n.lastHeard[id]) >= n.cfg.Timeout && (n.strangerAt[id].IsZero() || n.now.Sub(n.strangerAt[id]) >= n.cfg.Timeout) {
			return false
		}
	}
	return true
}

// startReform re-forms the cluster from the processes up now: the old
// membership cannot go on (no majority of it is alive, or a shard has no
// copy left), and every ps is up again. The epoch names this one, by this
// ps; a later one, or one of a higher-numbered ps, wins.
func (n *Node) startReform() {
	var dead, lost []int
	boots := make([]uint64, n.cfg.N)
	for id := 0; id < n.cfg.N; id++ {
		switch {
		case id == n.cfg.ID:
			boots[id] = n.boot
		case n.now.Sub(n.lastHeard[id]) < n.cfg.Timeout && !n.removed[id]:
			boots[id] = n.bootOf[id]
		default:
			boots[id] = n.strangerBoot[id]
			dead = append(dead, id)
		}
	}
	for s := 0; s < n.cfg.N; s++ {
		all := true
		for _, m := range Members(s, n.cfg.N, n.cfg.R) {
			all = all && slices.Contains(dead, m)
		}
		if all || n.lost[s] {
			lost = append(lost, s)
		}
	}
	epoch := (n.epoch>>8+1)<<8 | uint64(n.cfg.ID)
	n.event("ps %d: every copy of shards %v lost (ps %v died): re-forming the cluster from the processes up now (epoch %d); every copy falls back to the newest checkpoint", n.cfg.ID, lost, dead, epoch>>8)
	n.reform(epoch, boots, &Reform{Epoch: epoch, By: n.cfg.ID, Lost: lost, Dead: dead})
}

// reform starts membership epoch afresh with the processes boots: every ps
// a member of incarnation 0, every copy empty and in (the caller restores
// the newest checkpoint into each).
func (n *Node) reform(epoch uint64, boots []uint64, r *Reform) {
	n.epoch, n.dirty = epoch, true
	n.rd.Reformed = r
	// Nothing of the old membership is applied or answered any more.
	n.rd.Apply, n.rd.Install, n.rd.Acked, n.rd.Snapshots, n.rd.CaughtUp, n.rd.TookOver = nil, nil, nil, nil, nil, nil
	n.removed, n.votes, n.admits, n.lost = map[int]bool{}, map[int]map[int]bool{}, map[int]map[int]uint64{}, map[int]bool{}
	for id := 0; id < n.cfg.N; id++ {
		n.gen[id], n.bootOf[id] = 0, boots[id]
		n.lastHeard[id], n.grants[id], n.strangerAt[id] = n.now, time.Time{}, time.Time{}
	}
	n.myGen, n.noMajoritySince, n.lastBeat = 0, time.Time{}, time.Time{}
	n.joining = boots[n.cfg.ID] != n.boot
	for _, ss := range n.shards {
		*ss = shardState{id: ss.id, members: ss.members, lastReq: map[int]reqState{}, in: !n.joining, snapped: !n.joining}
		if !n.joining && ss.members[0] == n.cfg.ID {
			ss.primary, ss.match = true, map[int]uint64{}
		}
	}
	if n.joining {
		n.rd.Joining = true
	}
	if r.By != n.cfg.ID {
		n.event("ps %d: the cluster re-formed (epoch %d, by ps %d): every copy falls back to the newest checkpoint", n.cfg.ID, epoch>>8, r.By)
	}
}

func (n *Node) primaryOfAny() bool {
	for _, ss := range n.shards {
		if ss.primary && !ss.lost {
			return true
		}
	}
	return false
}

func (n *Node) shardIDs() []int {
	ids := make([]int, 0, len(n.shards))
	for s := range n.shards {
		ids = append(ids, s)
	}
	slices.Sort(ids)
	return ids
}

func (n *Node) beat() {
	for id := 0; id < n.cfg.N; id++ {
		if id != n.cfg.ID && !n.removed[id] {
			n.send(Message{Type: Heartbeat, To: id, Sent: n.now})
		}
	}
	for _, s := range n.shardIDs() {
		ss := n.shards[s]
		if ss.lost {
			continue
		}
		for c := range ss.catching {
			n.send(Message{Type: SyncReq, To: c, Shard: s, Seq: ss.applied})
		}
		if ss.primary { // a backup that made no progress since the last beat gets its entries again
			if ss.beatAt == nil {
				ss.beatAt = map[int]uint64{}
			}
			for _, b := range n.backups(ss) {
				m := ss.match[b]
				if j := ss.joiners[b]; j != nil {
					switch {
					case !j.sent:
						continue
					case m < j.snap || (m == j.snap && !j.held):
						// Its snapshot was not installed: a new one after
						// the timeout (a large one may take a while).
						if n.now.Sub(j.sentAt) >= n.cfg.Timeout {
							j.asked, j.sent = false, false
						}
						continue
					}
				}
				if m < ss.applied && m == ss.beatAt[b] {
					n.resend(ss, b, m)
				}
				ss.beatAt[b] = m
			}
			n.askSnapshots(ss)
		}
	}
}

// resend sends backup b the entries after seq, if any.
func (n *Node) resend(ss *shardState, b int, seq uint64) {
	var es []Entry
	for _, e := range ss.log {
		if e.Seq > seq {
			es = append(es, e)
		}
	}
	if len(es) > 0 {
		n.send(Message{Type: Append, To: b, Shard: ss.id, Entries: es, Commit: ss.commit})
	}
}

func (n *Node) event(format string, args ...any) {
	n.rd.Events = append(n.rd.Events, fmt.Sprintf(format, args...))
}

// vote records voter's vote against x and removes x on a majority.
func (n *Node) vote(x, voter int) {
	if n.removed[x] {
		return
	}
	if n.votes[x] == nil {
		n.votes[x] = map[int]bool{}
	}
	n.votes[x][voter] = true
	n.dirty = true
	n.count(x)
}

// count removes x if a majority of the N ps voted it out, counting no
// vote of a ps itself removed (its view is stale).
func (n *Node) count(x int) {
	c := 0
	for v := range n.votes[x] {
		if !n.removed[v] {
			c++
		}
	}
	if c >= n.majority() {
		n.remove(x)
	}
}

// remove makes x removed for good and gives its shards to their next copies.
func (n *Node) remove(x int) {
	if n.removed[x] {
		return
	}
	n.removed[x] = true
	n.dirty = true
	n.event("ps %d: ps %d removed (view %d)", n.cfg.ID, x, n.View())
	if x == n.cfg.ID {
		n.stopped = true
		n.event("ps %d: removed from the cluster by a majority: stops serving", n.cfg.ID)
		return
	}
	delete(n.admits, x)
	for s := 0; s < n.cfg.N; s++ {
		if !n.lost[s] && n.Primary(s) == -1 {
			n.lost[s] = true
			n.rd.Lost = append(n.rd.Lost, s)
			n.event("ps %d: all copies of shard %d lost (ps %v removed): falling back to checkpoint", n.cfg.ID, s, Members(s, n.cfg.N, n.cfg.R))
		}
	}
	for _, s := range n.shardIDs() {
		ss := n.shards[s]
		if ss.lost || !slices.Contains(ss.members, x) {
			continue
		}
		if n.lost[s] {
			ss.lost, ss.primary, ss.catching = true, false, nil
			continue
		}
		delete(ss.match, x)
		delete(ss.catching, x)
		delete(ss.joiners, x)
		if n.Primary(s) == n.cfg.ID && !ss.primary && ss.catching == nil {
			n.takeover(ss)
		}
		n.finishCatchUp(ss)
		n.advance(ss)
	}
}

// takeover starts serving ss as primary: first the entries the other live
// copies hold beyond this one's.
func (n *Node) takeover(ss *shardState) {
	if !ss.in { // still copying it: no copy left that holds it all
		ss.lost, ss.primary, ss.catching = true, false, nil
		n.lost[ss.id] = true
		n.rd.Lost = append(n.rd.Lost, ss.id)
		n.event("ps %d: all full copies of shard %d lost (ps %v removed, ps %d was still copying it): falling back to checkpoint", n.cfg.ID, ss.id, n.removedOf(ss), n.cfg.ID)
		return
	}
	ss.catching, ss.match, ss.joiners = map[int]bool{}, map[int]uint64{}, nil
	for _, b := range n.backups(ss) {
		ss.catching[b] = true
		n.send(Message{Type: SyncReq, To: b, Shard: ss.id, Seq: ss.applied})
	}
}

func (n *Node) finishCatchUp(ss *shardState) {
	if ss.catching == nil || len(ss.catching) > 0 {
		return
	}
	ss.catching, ss.primary = nil, true
	ss.pending, ss.held = nil, nil
	n.rd.TookOver = append(n.rd.TookOver, ss.id)
	for _, b := range n.backups(ss) {
		if ss.joiners[b] == nil {
			n.resend(ss, b, ss.match[b])
		}
	}
	n.askSnapshots(ss)
}

func (n *Node) removedOf(ss *shardState) []int {
	var out []int
	for _, m := range ss.members {
		if n.removed[m] {
			out = append(out, m)
		}
	}
	return out
}

// askSnapshots asks the caller for a copy of ss for each rejoining copy
// that has none on the way, at a step boundary (nothing held).
func (n *Node) askSnapshots(ss *shardState) {
	if !ss.primary || ss.lost || ss.catching != nil || len(ss.held) > 0 || n.stopped || n.joining {
		return
	}
	for _, b := range sortedKeys(func() map[int]bool {
		m := map[int]bool{}
		for b, j := range ss.joiners {
			m[b] = j.heard && !j.asked
		}
		return m
	}()) {
		ss.joiners[b].asked = true
		n.rd.Snapshots = append(n.rd.Snapshots, SnapshotReq{Shard: ss.id, To: b, Seq: ss.applied})
	}
}

// SnapshotLater tells the node that the copy of shard s asked for ps to
// (a SnapshotReq of Ready) was not taken now: it asks again at a later
// step boundary (the next heartbeat or acknowledgement).
func (n *Node) SnapshotLater(s, to int) {
	if ss := n.shards[s]; ss != nil {
		if j := ss.joiners[to]; j != nil && !j.sent {
			j.asked, j.cutting = false, false
		}
	}
}

// ReserveSnapshot tells the node that the caller took its copy of shard s
// for ps to (a SnapshotReq of Ready) at seq, now, and builds its bytes
// with no lock held: the node keeps the log's entries after seq until
// SendSnapshot sends the copy with them (or SnapshotLater gives it up),
// and ships the rejoining ps nothing before. It fails where SendSnapshot
// at seq would now.
func (n *Node) ReserveSnapshot(s, to int, seq uint64) error {
	ss := n.shards[s]
	if ss == nil || !ss.primary || ss.lost || n.stopped {
		return fmt.Errorf("replica: snapshot of shard %d for ps %d: this ps no longer serves it", s, to)
	}
	j := ss.joiners[to]
	if j == nil || j.sent || seq != ss.applied || len(ss.held) > 0 {
		if j != nil && !j.sent {
			j.asked = false
		}
		return fmt.Errorf("replica: snapshot of shard %d at seq %d for ps %d: the shard is at seq %d now", s, seq, to, ss.applied)
	}
	j.cutting, j.cutAt, j.cutReqs, j.snap = true, seq, appliedReqs(ss), 0
	return nil
}

// appliedReqs is ss's table of requests applied: each client's last.
func appliedReqs(ss *shardState) []ReqID {
	reqs := make([]ReqID, 0, len(ss.lastReq))
	for c, r := range ss.lastReq {
		reqs = append(reqs, ReqID{Client: c, N: r.n})
	}
	slices.SortFunc(reqs, func(a, b ReqID) int { return cmp.Compare(a.Client, b.Client) })
	return reqs
}

// AskSnapshots asks, in Ready, for the copies of shard s that rejoining
// ps wait for, if the shard is at a step boundary (nothing held) now.
func (n *Node) AskSnapshots(s int) {
	if ss := n.shards[s]; ss != nil {
		n.askSnapshots(ss)
	}
}

// SendSnapshot sends ps to, rejoining, the caller's copy of shard s as it
// is at seq (a SnapshotReq of Ready): data, with the table of requests
// applied, after which the log follows. It fails if the shard moved on
// or this ps no longer serves it (the node asks again).
func (n *Node) SendSnapshot(s, to int, seq uint64, data any) error {
	ss := n.shards[s]
	if ss == nil || !ss.primary || ss.lost || n.stopped {
		return fmt.Errorf("replica: snapshot of shard %d for ps %d: this ps no longer serves it", s, to)
	}
	j := ss.joiners[to]
	// A copy reserved at seq (ReserveSnapshot) goes with the entries the
	// log kept since; any other is taken now.
	reserved := j != nil && j.cutting && j.cutAt == seq && (seq == ss.applied || (len(ss.log) > 0 && ss.log[0].Seq <= seq+1))
	if j == nil || (!reserved && (seq != ss.applied || len(ss.held) > 0)) {
		if j != nil {
			j.asked, j.cutting = false, false
		}
		return fmt.Errorf("replica: snapshot of shard %d at seq %d for ps %d: the shard is at seq %d now", s, seq, to, ss.applied)
	}
	reqs := appliedReqs(ss)
	if reserved {
		reqs = j.cutReqs
	}
	j.cutting, j.cutReqs = false, nil
	j.sent, j.snap, j.sentAt, j.held = true, seq, n.now, false
	ss.match[to] = 0
	n.send(Message{Type: Snapshot, To: to, Shard: s, Seq: seq, Commit: ss.commit, Entries: []Entry{{Shard: s, Seq: seq, Reqs: reqs, Data: data}}})
	n.resend(ss, to, seq) // what was applied since a reserved cut
	return nil
}

// ErrRefused is what StepFrom returns for a message it did not count: one
// whose sender is not the ps it claims to be, not of this cluster, or a
// re-formation this ps does not agree to.
var ErrRefused = errors.New("replica: message refused")

// Step feeds a message from another ps, taken to come from m.From. It is
// for callers whose transport already proved that (tests, a fake network);
// a caller reading connections uses StepFrom.
func (n *Node) Step(m Message) { _ = n.StepFrom(m.From, m) }

// StepFrom feeds a message that arrived over a connection whose peer is
// ps sender: the identity its certificate proves (TLS), or the ps that
// connection registered as (plain, token); -1 for a peer that is no ps (a
// worker's certificate). The message counts only if m.From is sender:
// nobody votes, grants a lease or appends in another ps's name. A later
// epoch (a re-formation) is taken only where this ps agrees the old
// membership cannot go on (reformAgreed); one message alone never re-forms
// a healthy cluster. A refused message changes nothing and returns an
// error wrapping ErrRefused that says why.
func (n *Node) StepFrom(sender int, m Message) error {
	switch {
	case n.stopped:
		return nil
	case sender < 0 || sender >= n.cfg.N:
		return fmt.Errorf("%w: a %v from a peer that is not a ps of this cluster (claims ps %d)", ErrRefused, m.Type, m.From)
	case m.From != sender:
		return fmt.Errorf("%w: a %v claiming to be from ps %d over the connection of ps %d", ErrRefused, m.Type, m.From, sender)
	case m.To != n.cfg.ID || m.From == n.cfg.ID:
		return fmt.Errorf("%w: a %v from ps %d to ps %d, received by ps %d", ErrRefused, m.Type, m.From, m.To, n.cfg.ID)
	case (m.Gens != nil && len(m.Gens) != n.cfg.N) || (m.Boots != nil && len(m.Boots) != n.cfg.N):
		return fmt.Errorf("%w: a %v from ps %d naming %d/%d ps, in a cluster of %d", ErrRefused, m.Type, m.From, len(m.Gens), len(m.Boots), n.cfg.N)
	}
	if m.Type == Heartbeat && m.Sent.After(n.now) {
		m.Sent = n.now // a sender's clock ahead of ours grants no more than ours
	}
	switch {
	case m.Epoch > n.epoch && m.Boots != nil:
		if why := n.reformAgreed(m); why != "" {
			return fmt.Errorf("%w: ps %d: re-formation epoch %d from ps %d not taken: %s", ErrRefused, n.cfg.ID, m.Epoch>>8, m.From, why)
		}
		n.reform(m.Epoch, m.Boots, &Reform{Epoch: m.Epoch, By: int(m.Epoch & 0xff)})
	case m.Epoch > n.epoch:
		return fmt.Errorf("%w: ps %d: a later epoch (%d) from ps %d without its processes", ErrRefused, n.cfg.ID, m.Epoch>>8, m.From)
	case m.Epoch < n.epoch: // of a membership that re-formed since: it learns from the answer
		if m.Type == Heartbeat {
			n.send(Message{Type: HeartbeatResp, To: m.From, Sent: m.Sent})
		}
		return nil
	}
	n.step(m)
	return nil
}

// reformAgreed says why this ps does not take the re-formation m carries,
// or "" if it does. A re-formation replaces the membership with the
// processes m.Boots names and throws every copy back to the checkpoint, so
// a ps takes it only when its own view says the old membership cannot go
// on, as the ps that started it saw (startReform): it is a new process not
// yet readmitted (it holds nothing), or it has heard no majority for a
// timeout, or it knows a shard lost; or it is a process started again
// that never held a lease, and the re-formation leaves it out (it then
// asks to be readmitted, as after any restart). And the processes named
// must be the ones it hears: this one, and every ps it hears now as its
// member.
func (n *Node) reformAgreed(m Message) string {
	if by := int(m.Epoch & 0xff); by >= n.cfg.N {
		return fmt.Sprintf("it names ps %d as its author, in a cluster of %d", by, n.cfg.N)
	}
	if m.Boots[m.From] != m.Boot {
		return fmt.Sprintf("its sender's process (%d) is not among the processes it names (%d)", m.Boot, m.Boots[m.From])
	}
	switch fresh := !n.leasedOnce && m.Boots[n.cfg.ID] != n.boot; {
	case n.joining:
	case fresh:
		// A process started again that never held a lease: the
		// re-formation leaves it out, so taking it only makes this
		// process a joiner, as its peers already know it.
	default:
		noMajority := !n.noMajoritySince.IsZero() && n.now.Sub(n.noMajoritySince) >= n.cfg.Timeout
		if !noMajority && len(n.lost) == 0 {
			return "this ps hears a majority and no shard is lost"
		}
		if m.Boots[n.cfg.ID] != n.boot {
			return fmt.Sprintf("it names another process (%d) as this ps (%d)", m.Boots[n.cfg.ID], n.boot)
		}
	}
	for x := 0; x < n.cfg.N; x++ {
		if x != n.cfg.ID && x != m.From && !n.removed[x] && n.bootOf[x] != 0 && n.now.Sub(n.lastHeard[x]) < n.cfg.Timeout && m.Boots[x] != n.bootOf[x] {
			return fmt.Sprintf("it names another process (%d) as ps %d, which this ps hears as %d", m.Boots[x], x, n.bootOf[x])
		}
	}
	return ""
}

// step is StepFrom once m is known to be from m.From, of this epoch.
func (n *Node) step(m Message) {
	if n.joining {
		n.learn(m)
		return
	}
	// A process other than the member this ps knows as m.From (a ps
	// started again, or one removed): it is heard only as asking to be
	// readmitted, once its old incarnation is removed.
	if b := n.bootOf[m.From]; (b != 0 && m.Boot != b) || (b == 0 && n.removed[m.From]) || gen(m.Gens, m.From) < n.gen[m.From] {
		n.strangerAt[m.From], n.strangerBoot[m.From] = n.now, m.Boot
		if m.Type == Heartbeat {
			n.admit(m.From, m.Boot, n.cfg.ID)
			n.send(Message{Type: HeartbeatResp, To: m.From, Sent: m.Sent})
		}
		return
	}
	if n.bootOf[m.From] == 0 {
		n.bootOf[m.From], n.dirty = m.Boot, true
	}
	n.lastHeard[m.From] = n.now
	for _, s := range n.shardIDs() { // a readmitted ps heard: it can take its snapshot now
		if j := n.shards[s].joiners[m.From]; j != nil && !j.heard {
			j.heard = true
			n.askSnapshots(n.shards[s])
		}
	}
	n.learn(m)
	if n.stopped || n.joining {
		return
	}
	if !n.removed[m.From] {
		for _, x := range m.Votes {
			if x >= 0 && x < n.cfg.N && x != m.From && gen(m.Gens, x) == n.gen[x] {
				n.vote(x, m.From)
			}
		}
		for _, a := range m.Admits {
			if a.PS >= 0 && a.PS < n.cfg.N && a.PS != m.From && gen(m.Gens, a.PS) == n.gen[a.PS] {
				n.admit(a.PS, a.Boot, m.From)
			}
		}
	}
	if n.stopped || n.joining {
		return
	}
	n.stepKind(m)
}

// stepKind is Step's answer to a message by its kind, once its sender is
// known to be a member heard from and its votes and admissions counted.
func (n *Node) stepKind(m Message) {
	ss := n.shards[m.Shard]
	switch m.Type {
	case Heartbeat:
		grant := !n.votes[m.From][n.cfg.ID] && !n.removed[m.From]
		n.send(Message{Type: HeartbeatResp, To: m.From, Sent: m.Sent, Grant: grant})
	case HeartbeatResp:
		if m.Grant && m.Sent.After(n.grants[m.From]) {
			n.grants[m.From] = m.Sent
		}
		for _, s := range n.shardIDs() {
			n.advance(n.shards[s])
		}
	case Append:
		if ss == nil || ss.lost || n.Primary(m.Shard) != m.From {
			return // not its primary by this ps's view: the sender learns from Removed
		}
		if ss.snapped {
			for _, e := range m.Entries {
				if e.Seq == ss.applied+1 {
					n.apply(ss, e, true)
				}
			}
			if m.Commit > ss.commit {
				ss.commit = min(m.Commit, ss.applied)
				n.trim(ss)
			}
			if m.Grant && !ss.in {
				ss.in = true
				n.rd.CaughtUp = append(n.rd.CaughtUp, CaughtUp{Shard: ss.id, From: m.From, Seq: ss.applied})
				n.event("ps %d holds a full copy of shard %d again (seq %d), counted by its primary ps %d", n.cfg.ID, ss.id, ss.applied, m.From)
			}
		}
		n.send(Message{Type: AppendResp, To: m.From, Shard: m.Shard, Seq: ss.applied, Grant: ss.snapped})
	case Snapshot:
		if ss == nil || ss.lost || n.Primary(m.Shard) != m.From {
			return
		}
		if !ss.in && len(m.Entries) == 1 && m.Entries[0].Seq == m.Seq && (!ss.snapped || m.Seq > ss.applied) {
			e := m.Entries[0]
			e.Shard = ss.id
			n.rd.Apply = slices.DeleteFunc(n.rd.Apply, func(a Entry) bool { return a.Shard == ss.id }) // superseded
			ss.applied, ss.commit, ss.log, ss.snapped = m.Seq, m.Seq, nil, true
			ss.lastReq = map[int]reqState{}
			for _, r := range e.Reqs {
				ss.lastReq[r.Client] = reqState{n: r.N, seq: m.Seq}
			}
			n.rd.Install = append(n.rd.Install, e)
		}
		n.send(Message{Type: AppendResp, To: m.From, Shard: m.Shard, Seq: ss.applied, Grant: ss.snapped})
	case AppendResp:
		if ss == nil || !ss.primary || n.removed[m.From] {
			return
		}
		if j := ss.joiners[m.From]; j != nil {
			if !j.sent || !m.Grant {
				return // nothing it holds counts before its snapshot
			}
			j.held = true
			if m.Seq > ss.match[m.From] {
				ss.match[m.From] = m.Seq
			}
			// It holds every entry acknowledged so far: it counts from now
			// on, so it holds every entry acknowledged later too.
			if m.Seq >= ss.commit && ss.catching == nil {
				delete(ss.joiners, m.From)
				n.event("ps %d: ps %d holds a full copy of shard %d again (seq %d): %d copies", n.cfg.ID, m.From, ss.id, m.Seq, 1+len(n.backups(ss))-len(ss.joiners))
				n.send(Message{Type: Append, To: m.From, Shard: ss.id, Commit: ss.commit, Grant: true})
			}
			n.advance(ss)
			return
		}
		if m.Seq > ss.match[m.From] {
			ss.match[m.From] = m.Seq
		}
		n.advance(ss)
	case SyncReq:
		if ss == nil || n.Primary(m.Shard) != m.From {
			return
		}
		var es []Entry
		if ss.in {
			for _, e := range ss.log {
				if e.Seq > m.Seq {
					es = append(es, e)
				}
			}
		}
		n.send(Message{Type: SyncResp, To: m.From, Shard: m.Shard, Seq: ss.applied, Entries: es, Grant: ss.in})
	case SyncResp:
		if ss == nil || ss.catching == nil || !ss.catching[m.From] {
			return
		}
		if m.Grant {
			for _, e := range m.Entries {
				if e.Seq == ss.applied+1 {
					n.apply(ss, e, true)
				}
			}
			ss.match[m.From] = m.Seq
		} else { // a copy still rejoining: it gets a snapshot from this ps
			if ss.joiners == nil {
				ss.joiners = map[int]*joiner{}
			}
			ss.joiners[m.From] = &joiner{heard: true}
		}
		delete(ss.catching, m.From)
		n.finishCatchUp(ss)
		n.advance(ss)
	}
}

func gen(gens []uint64, x int) uint64 {
	if gens == nil {
		return 0
	}
	return gens[x]
}

// learn merges a peer's membership: incarnations, the processes they are,
// removals. This process learns so whether it is the member its peers
// know, a new process to be readmitted, or readmitted.
func (n *Node) learn(m Message) {
	me := n.cfg.ID
	for x := 0; x < n.cfg.N; x++ {
		g, b := gen(m.Gens, x), uint64(0)
		if m.Boots != nil {
			b = m.Boots[x]
		}
		switch {
		case g > n.gen[x] && x == me:
			if b != n.boot {
				n.stopped = true // a newer process is this ps
				n.event("ps %d: another process was readmitted as ps %d (incarnation %d): this one stops", me, me, g)
				return
			}
			n.admitted(g)
		case g > n.gen[x]:
			n.readmit(x, g, b)
		case g == n.gen[x] && b != 0 && x == me && b != n.boot && !n.joining:
			n.becomeJoiner(g)
		case g == n.gen[x] && b != 0 && n.bootOf[x] == 0 && x != me:
			n.bootOf[x], n.dirty = b, true
		}
	}
	for _, x := range m.Removed {
		if x < 0 || x >= n.cfg.N || gen(m.Gens, x) != n.gen[x] {
			continue
		}
		if x == me && !n.joining {
			var b uint64
			if m.Boots != nil {
				b = m.Boots[x]
			}
			if b != n.boot { // the removed one is another process (this one was started again)
				n.becomeJoiner(n.gen[x])
				n.removed[x], n.dirty = true, true
				continue
			}
		}
		if x == me && n.joining {
			if !n.removed[x] {
				n.removed[x], n.dirty = true, true
			}
			continue
		}
		n.remove(x)
	}
}

// becomeJoiner makes this process a non-member: it holds nothing and asks
// to be readmitted as ps ID's next incarnation.
func (n *Node) becomeJoiner(g uint64) {
	n.joining, n.dirty = true, true
	n.rd.Joining = true
	n.gen[n.cfg.ID] = g
	n.event("ps %d: the others know ps %d (incarnation %d) as another process: this one holds nothing and asks to be readmitted", n.cfg.ID, n.cfg.ID, g)
	for _, ss := range n.shards {
		*ss = shardState{id: ss.id, members: ss.members, lastReq: map[int]reqState{}}
	}
}

// admitted: this process is ps ID's incarnation g; its copies come from
// their primaries (snapshots, then the log).
func (n *Node) admitted(g uint64) {
	if !n.joining {
		n.becomeJoiner(n.gen[n.cfg.ID])
	}
	n.joining, n.myGen, n.dirty = false, g, true
	n.gen[n.cfg.ID], n.bootOf[n.cfg.ID] = g, n.boot
	delete(n.removed, n.cfg.ID)
	delete(n.votes, n.cfg.ID)
	delete(n.admits, n.cfg.ID)
	n.rd.Admitted = true
	for i := range n.lastHeard {
		n.lastHeard[i] = n.now
	}
	n.event("ps %d: readmitted as incarnation %d: copying its shards from their primaries", n.cfg.ID, g)
}

// admit records voter's vote to readmit removed ps x as the process boot,
// and readmits it on a majority.
func (n *Node) admit(x int, boot uint64, voter int) {
	if !n.removed[x] || boot == 0 || x == n.cfg.ID || n.removed[voter] {
		return
	}
	if n.admits[x] == nil {
		n.admits[x] = map[int]uint64{}
	}
	if _, ok := n.admits[x][voter]; ok {
		return // one vote per voter and incarnation
	}
	n.admits[x][voter], n.dirty = boot, true
	if voter == n.cfg.ID {
		n.event("ps %d votes to readmit ps %d as incarnation %d", n.cfg.ID, x, n.gen[x]+1)
	}
	c := 0
	for v, b := range n.admits[x] {
		if b == boot && !n.removed[v] {
			c++
		}
	}
	if c >= n.majority() {
		n.readmit(x, n.gen[x]+1, boot)
	}
}

// readmit makes x's incarnation g (the process boot) a member: its
// shards' primaries send it their copies.
func (n *Node) readmit(x int, g, boot uint64) {
	n.gen[x], n.bootOf[x], n.dirty = g, boot, true
	delete(n.removed, x)
	delete(n.votes, x)
	delete(n.admits, x)
	n.lastHeard[x], n.grants[x] = n.now, time.Time{}
	n.event("ps %d: ps %d readmitted as incarnation %d (view %d)", n.cfg.ID, x, g, n.View())
	for _, s := range n.shardIDs() {
		ss := n.shards[s]
		if !slices.Contains(ss.members, x) {
			continue
		}
		delete(ss.match, x)
		if ss.catching != nil {
			delete(ss.catching, x)
			n.finishCatchUp(ss)
		}
		if ss.primary && !ss.lost {
			if ss.joiners == nil {
				ss.joiners = map[int]*joiner{}
			}
			ss.joiners[x] = &joiner{}
			n.askSnapshots(ss)
		}
	}
}

// Ready returns what to do since the last call, and forgets it.
func (n *Node) Ready() Ready {
	rd := n.rd
	n.rd = Ready{}
	return rd
}
