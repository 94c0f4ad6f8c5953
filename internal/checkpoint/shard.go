package checkpoint

import (
	"bufio"
	"cmp"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/paramserv/paramserv/internal/vfs"
)

// Reserved __metadata__ keys, written by WriteShard and checked by
// ReadShard, so a shard file describes itself to any safetensors reader.
const (
	metaPrefix    = "paramserv."
	metaVersion   = metaPrefix + "format_version"
	metaStep      = metaPrefix + "step"
	metaShard     = metaPrefix + "shard"
	metaNumShards = metaPrefix + "num_shards"
	metaParent    = metaPrefix + "parent" // delta shards only
	// metaKeyOrder is "any" in a shard whose tables' keys are in no
	// particular order (Shard.AnyOrder), absent where they ascend.
	metaKeyOrder = metaPrefix + "key_order"
	keyOrderAny  = "any"
)

// CheckpointName is the directory name of the checkpoint at step:
// "ckpt-<step>".
func CheckpointName(step int64) string { return "ckpt-" + strconv.FormatInt(step, 10) }

// ShardFileName is the file name of shard k of n: "shard-<k>-of-<n>.safetensors".
func ShardFileName(k, n int) string {
	return fmt.Sprintf("shard-%d-of-%d.safetensors", k, n)
}

// ManifestName is the manifest's file name inside a checkpoint directory.
const ManifestName = "manifest.json"

// tmpSuffix marks a file being written; it is renamed away when complete.
const tmpSuffix = ".tmp"

// parseCheckpointName returns the step of a "ckpt-<step>" name.
func parseCheckpointName(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, "ckpt-")
	if !ok {
		return 0, false
	}
	step, err := strconv.ParseInt(s, 10, 64)
	if err != nil || step < 0 || CheckpointName(step) != name {
		return 0, false
	}
	return step, true
}

// WriteShard saves shard k of n of the checkpoint at step under dir, as
// dir/ckpt-<step>/shard-<k>-of-<n>.safetensors, and returns the ShardInfo
// the chief puts in the manifest.
//
// The file is written to a temporary name, fsynced, closed, renamed into
// place, and the directory fsynced, so the file appears whole or not at
// all; directories it creates are fsynced into their parents. Each
// parameter server calls WriteShard for its own k, concurrently with the
// others. It refuses (ErrExists) to write into a checkpoint whose manifest
// exists. On error no file is left under the final name by this call
// (though one from an earlier call may remain).
func WriteShard(fsys vfs.FS, dir string, step int64, k, n int, s Shard) (ShardInfo, error) {
	switch {
	case step < 0:
		return ShardInfo{}, fmt.Errorf("%w: step %d is negative", ErrInvalid, step)
	case n < 1 || k < 0 || k >= n:
		return ShardInfo{}, fmt.Errorf("%w: shard %d of %d", ErrInvalid, k, n)
	case s.Step < 0:
		return ShardInfo{}, fmt.Errorf("%w: shard step %d is negative", ErrInvalid, s.Step)
	case s.Delta && (s.Parent < 0 || s.Parent >= step):
		return ShardInfo{}, fmt.Errorf("%w: a delta of checkpoint %d on checkpoint %d", ErrInvalid, step, s.Parent)
	case s.Delta && s.AnyOrder:
		return ShardInfo{}, fmt.Errorf("%w: a delta shard's keys must ascend", ErrInvalid)
	case s.Indexed && !s.AnyOrder:
		return ShardInfo{}, fmt.Errorf("%w: a table index is for keys in any order (the table's)", ErrInvalid)
	}
	if err := checkTensors(s.Tensors); err != nil {
		return ShardInfo{}, err
	}
	meta := make(map[string]string, len(s.Meta)+4)
	for key, v := range s.Meta {
		if strings.HasPrefix(key, metaPrefix) {
			return ShardInfo{}, fmt.Errorf("%w: metadata key %q: the prefix %q is reserved", ErrInvalid, key, metaPrefix)
		}
		meta[key] = v
	}
	info := ShardInfo{Index: k, Step: s.Step, Delta: s.Delta, AnyOrder: s.AnyOrder, Indexed: s.Indexed}
	if s.Delta {
		info.Parent = s.Parent
		meta[metaParent] = strconv.FormatInt(s.Parent, 10)
	}
	if s.AnyOrder {
		meta[metaKeyOrder] = keyOrderAny
	}
	meta[metaVersion] = strconv.Itoa(info.version())
	meta[metaStep] = strconv.FormatInt(s.Step, 10)
	meta[metaShard] = strconv.Itoa(k)
	meta[metaNumShards] = strconv.Itoa(n)

	cdir := filepath.Join(dir, CheckpointName(step))
	if err := mkdirAllDurable(fsys, cdir); err != nil {
		return ShardInfo{}, fmt.Errorf("checkpoint: write shard %d of %d: %w", k, n, err)
	}
	if err := refuseComplete(fsys, cdir); err != nil {
		return ShardInfo{}, err
	}
	name := ShardFileName(k, n)
	h := newChunkCRC()
	var size int64
	var err error
	if slices.ContainsFunc(s.Tensors, func(t Tensor) bool { return t.Fill != nil }) {
		// Made piece by piece on every core while the pieces before
		// are written (stream.go).
		err = writeAtomicFile(fsys, cdir, name, func(f vfs.File) error {
			var err error
			h, size, err = writePieces(f, s.Tensors, meta)
			return err
		})
	} else {
		err = writeAtomic(fsys, cdir, name, func(w io.Writer) error {
			var err error
			size, err = EncodeSafetensors(hashingWriter{w, h}, s.Tensors, meta)
			return err
		})
	}
	if err != nil {
		return ShardInfo{}, err
	}
	info.File, info.Size = name, size
	info.Checksum = ChecksumCRC32C4M + ":" + hex.EncodeToString(h.Sum(nil))
	info.Tensors = make([]TensorInfo, len(s.Tensors))
	for i, t := range fileOrder(s.Tensors) {
		info.Tensors[i] = t.Info()
	}
	return info, nil
}

// refuseComplete returns ErrExists if the checkpoint directory has a
// manifest.
func refuseComplete(fsys vfs.FS, cdir string) error {
	if _, err := fsys.Stat(filepath.Join(cdir, ManifestName)); err == nil {
		return fmt.Errorf("%w: %s has a manifest", ErrExists, cdir)
	}
	return nil
}

// writeAtomic writes dir/name through a temporary file: create name.tmp,
// write, fsync, close, rename to name, fsync dir. On failure it removes the
// temporary file (best effort).
func writeAtomic(fsys vfs.FS, dir, name string, write func(io.Writer) error) (err error) {
	return writeAtomicFile(fsys, dir, name, func(f vfs.File) error {
		bw := bufio.NewWriterSize(f, 1<<20)
		if err := write(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// writeAtomicFile is writeAtomic with write given the file itself.
func writeAtomicFile(fsys vfs.FS, dir, name string, write func(vfs.File) error) (err error) {
	final := filepath.Join(dir, name)
	tmp := final + tmpSuffix
	f, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", final, err)
	}
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			fsys.Remove(tmp)
			err = fmt.Errorf("checkpoint: write %s: %w", final, err)
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	closed = true
	if err := f.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, final); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}

// mkdirAllDurable creates dir and its missing parents, and fsyncs the
// parent of each directory it created so the new entries survive a crash.
func mkdirAllDurable(fsys vfs.FS, dir string) error {
	var created []string // deepest first
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := fsys.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(created) == 0 {
		return nil
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range created {
		if err := fsys.SyncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// ReadShardFile reads the file of shard k of the checkpoint m describes,
// from dir/ckpt-<m.Step>. It checks the file's size and SHA-256 against the
// manifest and its tensors and self-description against the ShardInfo, and
// returns an error, never partial data, if any differ. Meta holds the
// file's metadata less the reserved keys. The shard of a delta checkpoint
// may be a delta (Shard.Delta); ReadShard applies it.
func ReadShardFile(fsys vfs.FS, dir string, m Manifest, k int) (Shard, error) {
	if k < 0 || k >= len(m.Shards) {
		return Shard{}, fmt.Errorf("%w: shard %d of a %d-shard checkpoint", ErrInvalid, k, len(m.Shards))
	}
	if err := m.Validate(); err != nil {
		return Shard{}, err
	}
	cdir := filepath.Join(dir, CheckpointName(m.Step))
	s, err := readShard(fsys, cdir, m, k, withData)
	if err != nil {
		return Shard{}, fmt.Errorf("checkpoint: read %s: %w", cdir, err)
	}
	return s, nil
}

// ReadShardMapped is ReadShard for a caller that reads the tensors once,
// as a restore does, and is then done with them. Where fsys opens files
// with an Fd method (vfs.OS) and shard k is a full shard (not a delta),
// its file is mapped into memory instead of being copied into a new
// buffer: nothing is zeroed or copied, the checksum is computed on every
// core, and the tensors' Data are the mapping, read only. They are valid
// until release is called, which must be called once the caller is done
// with every tensor (and with anything that shares their memory, such as
// Tensor.Float32sView's results); after it, reading them faults the
// process. A file that implements vfs.MappedReader is told of the bytes
// read through its mapping. Elsewhere (another File, a delta, a system
// without mmap) it is ReadShard and release does nothing. The checks are
// ReadShard's, all made before it returns; on error there is nothing to
// release. release may be called more than once.
func ReadShardMapped(fsys vfs.FS, dir string, m Manifest, k int) (s Shard, release func(), err error) {
	noop := func() {}
	if k < 0 || k >= len(m.Shards) || m.Shards[k].Delta {
		s, err := ReadShard(fsys, dir, m, k)
		return s, noop, err
	}
	if err := m.Validate(); err != nil {
		return Shard{}, noop, err
	}
	cdir := filepath.Join(dir, CheckpointName(m.Step))
	s, unmap, err := readShardMapped(fsys, cdir, m, k, false)
	if err != nil {
		return Shard{}, noop, fmt.Errorf("checkpoint: read %s: %w", cdir, err)
	}
	var once sync.Once
	return s, func() { once.Do(unmap) }, nil
}

// ReadShardOverlapped is ReadShardMapped that returns as soon as the file's
// header is read, while the checksum of the whole file is computed in the
// background: a restore copies the tensors into its state while the disk
// is still reading the file, instead of after. Nothing read from the
// tensors is to be trusted before s.Verified() returns nil: a caller
// builds what it builds from them, then calls Verified, and drops all of
// it if Verified returns an error (a damaged file). Reading the mapping
// where the file cannot be read (it shrank, or the disk failed) faults; a
// caller reads it on goroutines with debug.SetPanicOnFault set and turns
// that into an error, as the checksum does. release waits for the
// checksum before it unmaps the file. Where the file is not mapped (see
// ReadShardMapped) it is ReadShardMapped: the file is checked before it
// returns.
func ReadShardOverlapped(fsys vfs.FS, dir string, m Manifest, k int) (s Shard, release func(), err error) {
	if k < 0 || k >= len(m.Shards) || m.Shards[k].Delta {
		return ReadShardMapped(fsys, dir, m, k)
	}
	if err := m.Validate(); err != nil {
		return Shard{}, func() {}, err
	}
	cdir := filepath.Join(dir, CheckpointName(m.Step))
	s, unmap, err := readShardMapped(fsys, cdir, m, k, true)
	if err != nil {
		return Shard{}, func() {}, fmt.Errorf("checkpoint: read %s: %w", cdir, err)
	}
	inner := s // a copy: its Verified waits for the file's checksum
	s.SetVerify(func() error {
		if err := inner.Verified(); err != nil {
			return fmt.Errorf("checkpoint: read %s: %w", cdir, err)
		}
		return nil
	})
	var once sync.Once
	return s, func() { once.Do(unmap) }, nil
}

// readShardMapped is readShard with data, through a mapping of the file
// where mapFile makes one (unmap releases it), else through a buffer
// (unmap does nothing).
//
// With later, it checks the file's checksum in the background: s.verify
// waits for it, and unmap waits for it before unmapping.
func readShardMapped(fsys vfs.FS, cdir string, m Manifest, k int, later bool) (s Shard, unmap func(), err error) {
	si := m.Shards[k]
	path := filepath.Join(cdir, si.File)
	fi, err := fsys.Stat(path)
	if err != nil {
		return Shard{}, nil, fileError(si.File, err)
	}
	if fi.Size() != si.Size {
		// readShard words the error.
		s, err := readShard(fsys, cdir, m, k, withData)
		return s, func() {}, err
	}
	if err := preflight(fsys, cdir, si, false); err != nil {
		return Shard{}, nil, err
	}
	f, err := fsys.Open(path)
	if err != nil {
		return Shard{}, nil, fileError(si.File, err)
	}
	data, unmap, ok := mapFile(f, si.Size)
	f.Close()
	var progress func(int64)
	if mr, is := f.(vfs.MappedReader); is {
		progress = mr.ReadMapped
	}
	if !ok {
		s, err := readShard(fsys, cdir, m, k, withData)
		return s, func() {}, err
	}
	refs := &mapRefs{data: data, unmap: unmap}
	refs.n.Store(1)
	unmap = refs.readerDone // the reader's hold
	fail := func(err error) (Shard, func(), error) {
		unmap()
		return Shard{}, nil, fmt.Errorf("%s: %w", si.File, err)
	}
	h := si.newHash()
	check := func() error {
		if err := hashAll(h, data, progress); err != nil {
			return err
		}
		return si.verifySum(h)
	}
	if !later {
		if err := check(); err != nil {
			return fail(err)
		}
		hdr, tensors, err := decodeBytes(data)
		if err != nil {
			return fail(err)
		}
		if s, err = checkAgainstManifest(hdr, tensors, m, k); err != nil {
			return fail(err)
		}
		s.SetKeep(refs.hold)
		s.SetVerify(func() error {
			if err := refs.verified(); err != nil {
				return fmt.Errorf("%s: %w", si.File, err)
			}
			return nil
		})
		return s, unmap, nil
	}
	done := make(chan struct{})
	var sumErr error
	go func() {
		defer close(done)
		sumErr = check()
	}()
	verify := func() error {
		<-done
		if sumErr != nil {
			return fmt.Errorf("%s: %w", si.File, sumErr)
		}
		if err := refs.verified(); err != nil {
			return fmt.Errorf("%s: %w", si.File, err)
		}
		return nil
	}
	// The header is read while the checksum is computed; where it does not
	// parse, the checksum's verdict (a damaged file) is the clearer error.
	hdr, tensors, err := decodeMapped(data)
	if err == nil {
		s, err = checkAgainstManifest(hdr, tensors, m, k)
	}
	if err != nil {
		if verr := verify(); verr != nil {
			err = verr
		} else {
			err = fmt.Errorf("%s: %w", si.File, err)
		}
		unmap()
		return Shard{}, nil, err
	}
	s.SetVerify(verify)
	s.SetKeep(refs.hold)
	free := unmap
	return s, func() { <-done; free() }, nil
}

// mapRefs counts the holders of a file's mapping: its reader, and each
// hold (Shard.Keep: a restored table that keeps keys and index there);
// the last to let go unmaps it. When the reader lets go before a holder,
// the pages no holder named are given back (the mapping of a large file
// would otherwise keep all of it in the process's memory).
type mapRefs struct {
	data  []byte
	unmap func()
	n     atomic.Int64
	mu    sync.Mutex
	held  [][]byte // guarded by mu: the memory the holders named
	err   error    // guarded by mu: the first hold's failure to own its pages
}

// verified is the error of the first hold whose pages could not be made
// the process's own, or nil.
func (r *mapRefs) verified() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// hold adds a holder of the memory held (within the mapping) and returns
// its release, which may be called more than once.
//
// The pages of held become anonymous memory with the same bytes before it
// returns (ownSpans): a holder keeps them past the restore, and a page of
// the file's mapping, even one a write copied, faults the process at its
// next touch once an outside tool truncated the file. A page that cannot be read (the
// file shrank already) is an error of the shard's Verified (r.verified).
func (r *mapRefs) hold(held ...[]byte) (release func()) {
	r.n.Add(1)
	err := ownSpans(r.data, pageSpans(r.data, held))
	r.mu.Lock()
	r.held = append(r.held, held...)
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	var once sync.Once
	return func() { once.Do(r.drop) }
}

// ownSpans makes the spans of the mapping data (in order) the process's
// own memory (ownPages), a piece of at least 4 MiB to each of up to GOMAXPROCS
// goroutines (the kernel copies pages of one mapping on several cores at
// once), and returns the first failure.
func ownSpans(data []byte, spans []span) error {
	const piece = 4 << 20
	var merged []span // two holds may share a page: each page once
	for _, sp := range spans {
		if n := len(merged); n > 0 && sp.lo <= merged[n-1].hi {
			merged[n-1].hi = max(merged[n-1].hi, sp.hi)
			continue
		}
		merged = append(merged, sp)
	}
	var pieces []span
	for _, sp := range merged {
		for lo := sp.lo; lo < sp.hi; lo += piece {
			pieces = append(pieces, span{lo, min(sp.hi, lo+piece)})
		}
	}
	var (
		next  atomic.Int64
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range min(len(pieces), runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(pieces)); i = next.Add(1) - 1 {
				sp := pieces[i]
				if err := ownPages(data[sp.lo:sp.hi]); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%w: the pages a restored table keeps, bytes %d to %d, could not be read (%v): the file shrank while read, or the disk failed", ErrSize, sp.lo, sp.hi, err)
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// readerDone is the reader's release.
func (r *mapRefs) readerDone() {
	if r.n.Load() > 1 {
		r.mu.Lock()
		dropPagesBut(r.data, r.held)
		r.mu.Unlock()
	}
	r.drop()
}

func (r *mapRefs) drop() {
	if r.n.Add(-1) == 0 {
		r.unmap()
	}
}

// pageSize is the system's memory page.
var pageSize = os.Getpagesize()

// span is a part of a mapping, in offsets from its start rounded out to
// whole pages.
type span struct{ lo, hi uintptr }

// pageSpans is the whole pages of the mapping data that hold the bytes of
// keep (slices within data), in order; they may overlap.
func pageSpans(data []byte, keep [][]byte) []span {
	page := uintptr(pageSize)
	base := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	var spans []span
	for _, k := range keep {
		p := uintptr(unsafe.Pointer(unsafe.SliceData(k)))
		if len(k) == 0 || p < base || p-base >= uintptr(len(data)) {
			continue
		}
		lo := (p - base) &^ (page - 1)
		hi := min(uintptr(len(data)), (p-base+uintptr(len(k))+page-1)&^(page-1))
		spans = append(spans, span{lo, hi})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	return spans
}

// dropPagesBut gives back the whole memory pages of the mapping data that
// hold none of the bytes of keep (dropPages).
func dropPagesBut(data []byte, keep [][]byte) {
	if len(data) == 0 {
		return
	}
	page := uintptr(pageSize)
	spans := pageSpans(data, keep)
	at := uintptr(0) // the first byte not yet kept or dropped; a page boundary
	for _, sp := range append(spans, span{uintptr(len(data)), uintptr(len(data))}) {
		if sp.lo > at {
			end := sp.lo &^ (page - 1)
			if sp.lo == uintptr(len(data)) {
				end = sp.lo
			}
			if end > at {
				dropPages(data[at:end])
			}
		}
		at = max(at, sp.hi)
	}
}

// decodeMapped is decodeBytes of a mapping, a fault reading it an error.
func decodeMapped(data []byte) (hdr Header, tensors []Tensor, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer catchFault(&err, data)
	return decodeBytes(data)
}

// readMode is what readShard does with a shard file.
type readMode int

const (
	verifyOnly   readMode = iota // read through: size, checksum, header, key order
	verifyFinite                 // verifyOnly, and every F32 value finite (finiteCheck)
	withData                     // read into memory and decode
)

// readShard reads (withData) or only verifies shard k. Errors are reasons
// that start with the shard's file name.
func readShard(fsys vfs.FS, cdir string, m Manifest, k int, mode readMode) (Shard, error) {
	si := m.Shards[k]
	path := filepath.Join(cdir, si.File)
	fail := func(err error) (Shard, error) { return Shard{}, fmt.Errorf("%s: %w", si.File, err) }
	fi, err := fsys.Stat(path)
	if err != nil {
		return Shard{}, fileError(si.File, err)
	}
	if fi.Size() != si.Size {
		what := "truncated"
		if fi.Size() > si.Size {
			what = "too long"
		}
		return fail(errorf(ErrSize, "%s: %d bytes on disk, manifest says %d", what, fi.Size(), si.Size))
	}
	if err := preflight(fsys, cdir, si, mode == withData); err != nil {
		return Shard{}, err
	}
	f, err := fsys.Open(path)
	if err != nil {
		return Shard{}, fileError(si.File, err)
	}
	defer f.Close()
	h := si.newHash()
	var hdr Header
	var tensors []Tensor
	if mode == withData {
		// The whole file into one buffer, hashed as it arrives; the
		// tensors are slices of it.
		var data []byte
		data, err = readHashed(f, h, si.Size)
		if err != nil {
			return fail(err)
		}
		if err := si.verifySum(h); err != nil {
			return fail(err)
		}
		hdr, tensors, err = decodeBytes(data)
	} else {
		br := bufio.NewReaderSize(f, 1<<20)
		hdr, err = ReadHeader(io.TeeReader(br, h), si.Size)
		// Hash to the end whatever the parse said: a checksum mismatch is
		// the better explanation of a bad header. The tables' keys are
		// checked on the way.
		var keys *keyOrder
		var fin *finiteCheck
		rest := hash.Hash(h)
		if err == nil {
			var tee teeAll
			if keys = newKeyOrder(hdr, m, k); keys != nil {
				tee = append(tee, keys)
			}
			if fin = newFiniteCheck(hdr); mode == verifyFinite && fin != nil {
				tee = append(tee, fin)
			}
			if len(tee) > 0 {
				rest = hashTee{h, tee}
			}
		}
		if _, cerr := readHashed(br, rest, -1); cerr != nil {
			return fail(cerr)
		}
		if err := si.verifySum(h); err != nil {
			return fail(err)
		}
		if keys != nil && keys.err != nil {
			return fail(keys.err)
		}
		if fin != nil && fin.err != nil {
			return fail(fin.err)
		}
	}
	if err != nil {
		return fail(err)
	}
	s, err := checkAgainstManifest(hdr, tensors, m, k)
	if err != nil {
		return fail(err)
	}
	return s, nil
}

func abbrev(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

// checkAgainstManifest compares a shard's header with its ShardInfo and
// builds the Shard.
func checkAgainstManifest(hdr Header, tensors []Tensor, m Manifest, k int) (Shard, error) {
	si := m.Shards[k]
	want := map[string]string{
		metaVersion:   strconv.Itoa(si.version()),
		metaStep:      strconv.FormatInt(si.Step, 10),
		metaShard:     strconv.Itoa(k),
		metaNumShards: strconv.Itoa(len(m.Shards)),
	}
	if si.Delta {
		want[metaParent] = strconv.FormatInt(si.Parent, 10)
	} else if p, ok := hdr.Meta[metaParent]; ok {
		return Shard{}, errorf(ErrMismatch, "metadata %s is %q in a full shard", metaParent, p)
	}
	if si.AnyOrder {
		want[metaKeyOrder] = keyOrderAny
	} else if o, ok := hdr.Meta[metaKeyOrder]; ok {
		return Shard{}, errorf(ErrMismatch, "metadata %s is %q, the manifest says the keys ascend", metaKeyOrder, o)
	}
	for key, v := range want {
		if got, ok := hdr.Meta[key]; !ok || got != v {
			return Shard{}, errorf(ErrMismatch, "metadata %s is %q, manifest implies %q", key, got, v)
		}
	}
	if len(hdr.Tensors) != len(si.Tensors) {
		return Shard{}, errorf(ErrMismatch, "file has %d tensors, manifest lists %d", len(hdr.Tensors), len(si.Tensors))
	}
	for i, e := range hdr.Tensors {
		w := si.Tensors[i]
		if e.Name != w.Name || e.DType != w.DType || !slices.Equal(e.Shape, w.Shape) {
			return Shard{}, errorf(ErrMismatch, "tensor %d is %q %s %v in the file, %q %s %v in the manifest", i, e.Name, e.DType, e.Shape, w.Name, w.DType, w.Shape)
		}
	}
	s := Shard{Step: si.Step, Tensors: tensors, Delta: si.Delta, Parent: si.Parent, AnyOrder: si.AnyOrder, Indexed: si.Indexed}
	for key, v := range hdr.Meta {
		if !strings.HasPrefix(key, metaPrefix) {
			if s.Meta == nil {
				s.Meta = map[string]string{}
			}
			s.Meta[key] = v
		}
	}
	return s, nil
}
