package secure

import (
	"net"
	"sync"
	"time"
)

// refuseLogEvery is how often refusals of one peer are logged after its
// first.
const refuseLogEvery = time.Minute

// maxPeers bounds the peers remembered; beyond it, refusals of new peers are
// counted under one entry, so a flood from many addresses cannot grow the
// ps's memory.
const maxPeers = 1024

// refusals logs refused connections: a peer's first at once, then at most
// once per refuseLogEvery with the count since.
//
// Concurrency: refuse may be called from any goroutine; mu guards peers.
type refusals struct {
	logf func(string, ...any)
	now  func() time.Time

	mu    sync.Mutex
	peers map[string]*peerLog
}

type peerLog struct {
	logged time.Time // the last line logged
	since  int       // refusals not logged since
}

func newRefusals(logf func(string, ...any)) *refusals {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &refusals{logf: logf, now: time.Now, peers: make(map[string]*peerLog)}
}

func (r *refusals) refuse(addr net.Addr, why string) {
	peer := "?"
	if addr != nil {
		peer = addr.String()
		if h, _, err := net.SplitHostPort(peer); err == nil {
			peer = h
		}
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	pl, seen := r.peers[peer]
	if !seen {
		if len(r.peers) >= maxPeers {
			for k, v := range r.peers {
				if now.Sub(v.logged) >= refuseLogEvery && v.since == 0 {
					delete(r.peers, k)
				}
			}
		}
		if len(r.peers) >= maxPeers {
			peer = "other addresses"
			pl, seen = r.peers[peer]
		}
	}
	if !seen {
		pl = &peerLog{logged: now}
		r.peers[peer] = pl
		r.logf("refused a connection from %s before reading any request (%s); nothing of it was applied; further refusals of %s are logged at most once every %v", addrString(addr), why, peer, refuseLogEvery)
		return
	}
	pl.since++
	if now.Sub(pl.logged) < refuseLogEvery {
		return
	}
	r.logf("refused %d connections from %s in the last %v, the latest from %s (%s)", pl.since, peer, now.Sub(pl.logged).Round(time.Second), addrString(addr), why)
	pl.logged, pl.since = now, 0
}

func addrString(a net.Addr) string {
	if a == nil {
		return "an unknown address"
	}
	return a.String()
}
