package replica

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// codecCluster runs three ps whose every message crosses the wire form,
// with []byte entries: a push, ps 0 killed, ps 1 takes over, a retry is
// recognised. It returns every message's bytes (the fuzz seeds).
func codecCluster(t testing.TB) [][]byte {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := make([]*Node, 3)
	for id := range nodes {
		nodes[id], _ = New(Config{ID: id, N: 3, R: 2, Timeout: time.Second})
	}
	dead := map[int]bool{}
	var wire [][]byte
	held := map[int][]byte{}
	tookOver := false
	pump := func() {
		for range 1000 {
			var q []Message
			for id, nd := range nodes {
				if dead[id] {
					continue
				}
				rd := nd.Ready()
				for _, e := range rd.Apply {
					held[id] = append(held[id], e.Data.([]byte)...)
				}
				tookOver = tookOver || len(rd.TookOver) > 0
				q = append(q, rd.Messages...)
			}
			if len(q) == 0 {
				return
			}
			for _, m := range q {
				b, err := m.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				wire = append(wire, b)
				var got Message
				if err := got.UnmarshalBinary(b); err != nil {
					t.Fatalf("%v message: %v", m.Type, err)
				}
				if !dead[got.From] && !dead[got.To] {
					nodes[got.To].Step(got)
				}
			}
		}
		t.Fatal("messages still flowing")
	}
	tick := func(d time.Duration) {
		for end := now.Add(d); now.Before(end); now = now.Add(100 * time.Millisecond) {
			for id, nd := range nodes {
				if !dead[id] {
					nd.Tick(now)
				}
			}
			pump()
		}
	}
	tick(300 * time.Millisecond)
	if _, _, err := nodes[0].Propose(0, ReqID{Client: 1, N: 1}, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	pump()
	dead[0] = true
	tick(1500 * time.Millisecond)
	if _, dup, err := nodes[1].Propose(0, ReqID{Client: 1, N: 1}, []byte("abc")); err != nil || !dup {
		t.Fatalf("retry at the new primary: dup %v, %v; want a recognised retry", dup, err)
	}
	if !tookOver || string(held[1]) != "abc" {
		t.Fatalf("took over %v, ps 1 holds %q; want a takeover holding \"abc\"", tookOver, held[1])
	}
	return wire
}

func TestCodecCarriesACluster(t *testing.T) { codecCluster(t) }

func TestCodecRefuses(t *testing.T) {
	good, err := Message{Type: Append, From: 1, To: 2, Entries: []Entry{{Seq: 1, Reqs: []ReqID{{1, 1}}, Data: []byte("x")}}}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	huge := append([]byte(nil), good[:len(good)-1-4]...)
	huge = append(huge, 0xff, 0xff, 0xff, 0x7f, 'x') // 2 GiB of data claimed
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "version needs 1 bytes, 0 left"},
		{"version", append([]byte{1}, good[1:]...), "version 1, want 2"},
		{"type", append([]byte{2, 9}, good[2:]...), "message type 9, want 0..6"},
		{"grant", append([]byte{2, 2, 7}, good[3:]...), "grant 7, want 0 or 1"},
		{"cut short", good[:len(good)-1], "data bytes: 1 claimed (at least 1 bytes each), 0 bytes left"},
		{"trailing", append(append([]byte(nil), good...), 0), "1 bytes after the message"},
		{"huge data", huge, "data bytes: 2147483647 claimed (at least 1 bytes each), 1 bytes left"},
	} {
		var m Message
		err := m.UnmarshalBinary(tc.b)
		if !errors.Is(err, ErrCodec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrCodec saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := (Message{Entries: []Entry{{Data: 5}}}).MarshalBinary(); err == nil || !strings.Contains(err.Error(), "data is int, want []byte") {
		t.Errorf("Marshal of an int entry: %v, want a refusal", err)
	}
}

// FuzzUnmarshal: any bytes decode or are refused, never a panic, and what
// decodes encodes back to the same bytes.
func FuzzUnmarshal(f *testing.F) {
	for _, b := range codecCluster(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if m.UnmarshalBinary(b) != nil {
			return
		}
		again, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded and encoded again:\n%x\nwant\n%x", again, b)
		}
	})
}

func TestAppendBuffersIsMarshalBinary(t *testing.T) {
	m := Message{Type: SyncResp, From: 2, To: 1, Removed: []int{0}, Boot: 7, Gens: []uint64{1, 0, 0}, Boots: []uint64{9, 8, 7},
		Admits: []Admit{{PS: 0, Boot: 11}}, Entries: []Entry{
			{Shard: 1, Seq: 4, Reqs: []ReqID{{0, 3}, {1, 3}}, Data: []byte("aggregate")},
			{Shard: 1, Seq: 5, Data: nil},
			{Shard: 1, Seq: 6, Reqs: []ReqID{{0, 4}}, Data: []byte("push")},
		}}
	whole, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	bufs, err := m.AppendBuffers(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := bytes.Join(bufs, nil); !bytes.Equal(got, whole) {
		t.Fatalf("AppendBuffers joined:\n%x\nMarshalBinary:\n%x", got, whole)
	}
	if len(bufs) != 4 || &bufs[1][0] != &m.Entries[0].Data.([]byte)[0] {
		t.Errorf("AppendBuffers gave %d pieces, want 4 with the entries' data not copied", len(bufs))
	}
	var owned, copied Message
	if err := owned.UnmarshalOwned(whole); err != nil {
		t.Fatal(err)
	}
	if err := copied.UnmarshalBinary(whole); err != nil {
		t.Fatal(err)
	}
	d := owned.Entries[0].Data.([]byte)
	if string(d) != "aggregate" || string(copied.Entries[0].Data.([]byte)) != "aggregate" {
		t.Fatalf("decoded data %q and %q, want \"aggregate\"", d, copied.Entries[0].Data)
	}
	d[0] = 'A'
	if whole[bytes.Index(whole, []byte("Aggregate"))] != 'A' || string(copied.Entries[0].Data.([]byte)) != "aggregate" {
		t.Errorf("UnmarshalOwned must alias its input and UnmarshalBinary must not")
	}
}

// FuzzStep: whatever a peer sends, decoded, a node takes without a panic,
// and its removed set and view stay within the cluster.
func FuzzStep(f *testing.F) {
	for _, b := range codecCluster(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if m.UnmarshalBinary(b) != nil {
			return
		}
		nd, _ := New(Config{ID: 1, N: 3, R: 2, Timeout: time.Second})
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		nd.Tick(now)
		nd.Step(m)
		nd.Tick(now.Add(time.Second))
		nd.Ready()
		if nd.View() > 3 {
			t.Fatalf("view %d with 3 ps", nd.View())
		}
		for x := range nd.removed {
			if x < 0 || x >= 3 {
				t.Fatalf("ps %d removed, in a cluster of 3", x)
			}
		}
	})
}

// FuzzStepFrom: whatever a peer sends over the connection of whichever ps
// (or of no ps, sender -1), a healthy node takes it without a panic, and
// no one message from a connection other than its claimed sender's
// changes its membership or re-forms it.
func FuzzStepFrom(f *testing.F) {
	for _, b := range codecCluster(f) {
		f.Add(b, int8(0))
		f.Add(b, int8(2))
		f.Add(b, int8(-1))
	}
	f.Fuzz(func(t *testing.T, b []byte, sender int8) {
		var m Message
		if m.UnmarshalBinary(b) != nil {
			return
		}
		nd, _ := New(Config{ID: 1, N: 3, R: 2, Timeout: time.Second})
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		nd.Tick(now)
		for _, from := range []int{0, 2} { // it hears a majority
			nd.Step(Message{Type: Heartbeat, From: from, To: 1, Boot: uint64(from + 1), Sent: now})
		}
		nd.Ready()
		view, epoch := nd.View(), nd.epoch
		err := nd.StepFrom(int(sender), m)
		if int(sender) != m.From && err == nil {
			t.Fatalf("a message claiming ps %d over the connection of %d was taken", m.From, sender)
		}
		if int(sender) != m.From && (nd.View() != view || nd.epoch != epoch) {
			t.Fatalf("a refused message changed the view (%d → %d) or epoch (%d → %d)", view, nd.View(), epoch, nd.epoch)
		}
		if nd.epoch != epoch {
			t.Fatalf("one message re-formed a node that hears a majority: epoch %d → %d", epoch, nd.epoch)
		}
		nd.Tick(now.Add(time.Second))
		nd.Ready()
	})
}
