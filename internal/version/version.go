// Package version says which paramserv this is: the module's version, the
// commit it was built from, the Go version, and the version of the wire
// protocol between workers and ps, which two tasks must share to train
// together.
//
// Every gRPC call of a worker carries its protocol version and paramserv
// version as metadata (Header, SoftwareHeader), and every ps answer carries
// the ps's: each side refuses the other when the protocol versions differ,
// with a message naming both (Mismatch). A peer that sends no version (an
// older paramserv, a client of its own) is not refused.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
)

// Protocol is the version of the wire protocol (gRPC messages and the data
// path's frames together). Raise it when a change makes tasks of the old and
// the new version unable to train together; additive changes (a new field
// old peers ignore) keep it.
//
// Protocol 2: a ps reads no gRPC message over 1 MiB, and larger requests
// come in pieces (wire.GRPCPiece), which a ps of protocol 1 does not know;
// a worker of protocol 1 sends them whole, and is refused.
const Protocol = 2

// protocolForTests, set with -ldflags "-X
// github.com/paramserv/paramserv/internal/version.protocolForTests=2",
// makes a binary claim another protocol version, to test the refusal.
var protocolForTests string

// Current is the protocol version this binary speaks: Protocol, unless it
// was built to claim another for a test.
func Current() int {
	if n, err := strconv.Atoi(protocolForTests); err == nil {
		return n
	}
	return Protocol
}

// Metadata keys of the handshake carried by every gRPC call and answer.
const (
	Header         = "paramserv-protocol"
	SoftwareHeader = "paramserv-version"
)

// WaitInitHeader, in a Status call's metadata, asks the ps to answer once
// it is initialised or after this long (a Go duration, at most 10s),
// whichever is first: a worker waiting for the chief's Init starts at once
// instead of at its next poll. A ps that does not know it answers at once.
const WaitInitHeader = "paramserv-wait-init"

// Info is what `paramserv version` prints.
type Info struct {
	Module   string // the main module's version: a tag, or (devel)
	Commit   string // the VCS revision, "+dirty" when modified; "" if unknown
	Time     string // the commit's time, if known
	Go       string
	Protocol int
}

var (
	once sync.Once
	info Info
)

// Get returns the version of this binary.
func Get() Info {
	once.Do(func() {
		info = Info{Module: "(devel)", Go: runtime.Version(), Protocol: Current()}
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		if v := bi.Main.Version; v != "" {
			info.Module = v
		}
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Commit = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && info.Commit != "" {
			info.Commit += "+dirty"
		}
	})
	return info
}

// Short is one line for logs: "paramserv (devel) commit 1a2b3c4d5e6f, go1.24.1, wire protocol 1".
func (i Info) Short() string {
	commit := "unknown"
	if i.Commit != "" {
		commit = i.Commit
		if len(commit) > 12 && !strings.HasSuffix(commit, "+dirty") {
			commit = commit[:12]
		} else if len(commit) > 12 {
			commit = commit[:12] + "+dirty"
		}
	}
	return fmt.Sprintf("paramserv %s commit %s, %s, wire protocol %d", i.Module, commit, i.Go, i.Protocol)
}

// String is the multi-line form `paramserv version` prints.
func (i Info) String() string {
	commit := i.Commit
	if commit == "" {
		commit = "unknown (built without VCS information)"
	}
	if i.Time != "" {
		commit += " (" + i.Time + ")"
	}
	return fmt.Sprintf("paramserv %s\ncommit: %s\ngo: %s\nwire protocol: %d\n", i.Module, commit, i.Go, i.Protocol)
}

// Software is the value of SoftwareHeader: the module version and commit.
func (i Info) Software() string {
	s := i.Module
	if i.Commit != "" {
		c := i.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " " + c
	}
	return s
}

// Mismatch checks a peer's protocol version as it came in metadata (""
// when the peer sent none, which is accepted). me and peer name the two
// sides ("this ps", "the worker"); peerSoftware is the peer's
// SoftwareHeader, if any. The error names both versions.
func Mismatch(me, peer, peerProtocol, peerSoftware string) error {
	if peerProtocol == "" {
		return nil
	}
	if n, err := strconv.Atoi(peerProtocol); err == nil && n == Current() {
		return nil
	}
	soft := ""
	if peerSoftware != "" {
		soft = " (paramserv " + peerSoftware + ")"
	}
	return fmt.Errorf("wire protocol mismatch: %s speaks protocol %d (paramserv %s), %s speaks protocol %s%s; run the same paramserv version on every task",
		me, Current(), Get().Software(), peer, peerProtocol, soft)
}
