package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Mem is an in-memory FS for tests, with fault injection and crash
// simulation.
//
// Mem is safe for concurrent use; one mutex guards the whole tree. Files
// returned by it are used by one goroutine at a time, like *os.File.
//
// Mem keeps two views of the tree. The current view is what the operations
// see. The durable view is what survives Crash: for each file, the contents
// as of its last Sync; for each directory, the entries as of its last
// SyncDir. Crash replaces the current view with the durable one, so a test
// can check that a sequence of operations cut short anywhere leaves the disk
// in a state the reader accepts. This is the pessimistic model: nothing that
// was not explicitly made durable survives (a real disk may keep more).
type Mem struct {
	mu   sync.Mutex // guards every field below and every node
	root *node
	inj  Injector // nil: no faults
	gen  int      // bumped by Crash; files opened before it fail
	// locks is the names whose Locker lock is held (Crash keeps them: a
	// crash of the disk is not one of the holders).
	locks map[string]bool
}

// node is a file or a directory.
type node struct {
	dir bool
	// A file's current and durable contents.
	data, synced []byte
	// A directory's current and durable entries.
	children, durable map[string]*node
	mtime             time.Time
}

func newDir() *node {
	return &node{dir: true, children: map[string]*node{}, durable: map[string]*node{}}
}

// NewMem returns an empty in-memory filesystem. Its root is both "/" and
// "."; relative and absolute names resolve from it alike.
func NewMem() *Mem {
	return &Mem{root: newDir()}
}

// Op names an FS or File operation, for fault injection.
type Op int

// The operations an Injector sees. AnyOp matches them all in FailNth and
// FailFrom.
const (
	AnyOp Op = iota
	OpCreate
	OpOpen
	OpRead
	OpWrite
	OpSync
	OpClose
	OpRename
	OpRemove
	OpMkdirAll
	OpReadDir
	OpStat
	OpSyncDir
)

var opNames = [...]string{"any", "create", "open", "read", "write", "sync", "close", "rename", "remove", "mkdirall", "readdir", "stat", "syncdir"}

func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Injector decides which operations of a Mem fail.
type Injector interface {
	// MaybeError is called before each operation with the operation and
	// the name it acts on (a File's operations report the name it was
	// opened with; Rename reports the old name). A non-nil error fails
	// the operation, which then has no effect: a failed Write writes
	// nothing. It is called with the Mem's lock held and must not call
	// back into the Mem.
	MaybeError(op Op, name string) error
}

// InjectorFunc adapts a function to Injector.
type InjectorFunc func(op Op, name string) error

// MaybeError calls f.
func (f InjectorFunc) MaybeError(op Op, name string) error { return f(op, name) }

// ErrInjected is the error a Fault returns when it was given none.
var ErrInjected = errors.New("vfs: injected fault")

// Fault is an Injector that fails the nth matching operation, and, if made
// by FailFrom, every matching operation after it.
type Fault struct {
	op     Op
	n      int
	err    error
	sticky bool
	seen   int // guarded by the Mem's lock, under which MaybeError runs
	fired  bool
}

// FailNth returns a Fault that fails only the nth (1-based) operation of
// kind op (AnyOp: of any kind) with err (nil: ErrInjected). FailNth(OpSync,
// 1, nil) makes the first fsync fail.
func FailNth(op Op, n int, err error) *Fault {
	if err == nil {
		err = ErrInjected
	}
	return &Fault{op: op, n: n, err: err}
}

// FailFrom returns a Fault that fails the nth (1-based) operation of kind op
// (AnyOp: of any kind) and every later one. FailFrom(OpWrite, 3,
// syscall.ENOSPC) is a disk that fills up on the third write;
// FailFrom(AnyOp, n, nil) is a process that dies before its nth operation,
// to be followed by Mem.Crash.
func FailFrom(op Op, n int, err error) *Fault {
	f := FailNth(op, n, err)
	f.sticky = true
	return f
}

// MaybeError implements Injector.
func (f *Fault) MaybeError(op Op, _ string) error {
	if f.op != AnyOp && op != f.op {
		return nil
	}
	f.seen++
	if f.seen == f.n || (f.sticky && f.seen > f.n) {
		f.fired = true
		return f.err
	}
	return nil
}

// Fired reports whether the Fault has failed an operation. Call it only
// while no operation on the Mem it is installed in is running.
func (f *Fault) Fired() bool { return f.fired }

// SetInjector installs inj (nil: none), replacing any previous one.
func (m *Mem) SetInjector(inj Injector) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inj = inj
}

// Crash simulates a power failure: every file reverts to its contents at its
// last Sync, every directory to its entries at its last SyncDir, and files
// opened before the crash fail with fs.ErrClosed. The injector stays.
func (m *Mem) Crash() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	seen := map[*node]bool{}
	var restore func(n *node)
	restore = func(n *node) {
		if seen[n] {
			return
		}
		seen[n] = true
		if !n.dir {
			n.data = slices.Clone(n.synced)
			return
		}
		n.children = maps.Clone(n.durable)
		for _, c := range n.children {
			restore(c)
		}
	}
	restore(m.root)
}

// Dump describes the current tree, one entry a line in name order, marking
// what a Crash would lose; for test failure messages.
func (m *Mem) Dump() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	var walk func(prefix string, n *node)
	walk = func(prefix string, n *node) {
		for _, name := range slices.Sorted(maps.Keys(n.children)) {
			c := n.children[name]
			var notes []string
			if n.durable[name] != c {
				notes = append(notes, "entry not synced")
			}
			p := prefix + name
			if c.dir {
				fmt.Fprintf(&b, "%s/", p)
			} else {
				fmt.Fprintf(&b, "%s %dB", p, len(c.data))
				if !slices.Equal(c.data, c.synced) {
					notes = append(notes, fmt.Sprintf("data not synced, %dB durable", len(c.synced)))
				}
			}
			if len(notes) > 0 {
				fmt.Fprintf(&b, " (%s)", strings.Join(notes, "; "))
			}
			b.WriteByte('\n')
			if c.dir {
				walk(p+"/", c)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(n.durable)) {
			if _, ok := n.children[name]; !ok {
				fmt.Fprintf(&b, "%s%s (removed, removal not synced)\n", prefix, name)
			}
		}
	}
	walk("", m.root)
	return b.String()
}

// split turns a name into its path components; the root is none.
func split(name string) ([]string, error) {
	p := filepath.ToSlash(filepath.Clean(name))
	p = strings.TrimLeft(p, "/")
	if p == "." || p == "" {
		return nil, nil
	}
	parts := strings.Split(p, "/")
	if slices.Contains(parts, "..") {
		return nil, syscall.EINVAL
	}
	return parts, nil
}

// check runs the injector. Called with m.mu held.
func (m *Mem) check(op Op, name string) error {
	if m.inj == nil {
		return nil
	}
	return m.inj.MaybeError(op, name)
}

// walk finds the node named by parts. Called with m.mu held.
func (m *Mem) walk(parts []string) (*node, error) {
	n := m.root
	for _, p := range parts {
		if !n.dir {
			return nil, syscall.ENOTDIR
		}
		c, ok := n.children[p]
		if !ok {
			return nil, syscall.ENOENT
		}
		n = c
	}
	return n, nil
}

// lookup finds the named node. Called with m.mu held.
func (m *Mem) lookup(name string) (*node, error) {
	parts, err := split(name)
	if err != nil {
		return nil, err
	}
	return m.walk(parts)
}

// parent finds the directory that holds name, and name's last component.
// Called with m.mu held.
func (m *Mem) parent(name string) (*node, string, error) {
	parts, err := split(name)
	if err != nil {
		return nil, "", err
	}
	if len(parts) == 0 {
		return nil, "", syscall.EINVAL // the root has no parent
	}
	d, err := m.walk(parts[:len(parts)-1])
	if err != nil {
		return nil, "", err
	}
	if !d.dir {
		return nil, "", syscall.ENOTDIR
	}
	return d, parts[len(parts)-1], nil
}

// Create implements FS.
func (m *Mem) Create(name string) (File, error) { return m.create(name, false) }

// CreateExcl implements FS. Fault injection sees it as OpCreate.
func (m *Mem) CreateExcl(name string) (File, error) { return m.create(name, true) }

func (m *Mem) create(name string, excl bool) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpCreate, name); err != nil {
		return nil, &fs.PathError{Op: "create", Path: name, Err: err}
	}
	d, base, err := m.parent(name)
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: name, Err: err}
	}
	n, ok := d.children[base]
	switch {
	case ok && excl:
		return nil, &fs.PathError{Op: "create", Path: name, Err: syscall.EEXIST}
	case ok && n.dir:
		return nil, &fs.PathError{Op: "create", Path: name, Err: syscall.EISDIR}
	case ok:
		n.data = nil // truncate; the durable contents stay until Sync
	default:
		n = &node{}
		d.children[base] = n
	}
	n.mtime = time.Now()
	return &memFile{m: m, n: n, name: name, gen: m.gen, write: true}, nil
}

// Open implements FS.
func (m *Mem) Open(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpOpen, name); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	n, err := m.lookup(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	if n.dir {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	return &memFile{m: m, n: n, name: name, gen: m.gen}, nil
}

// Rename implements FS.
func (m *Mem) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	lerr := func(err error) error { return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err} }
	if err := m.check(OpRename, oldname); err != nil {
		return lerr(err)
	}
	od, obase, err := m.parent(oldname)
	if err != nil {
		return lerr(err)
	}
	n, ok := od.children[obase]
	if !ok {
		return lerr(syscall.ENOENT)
	}
	nd, nbase, err := m.parent(newname)
	if err != nil {
		return lerr(err)
	}
	if od == nd && obase == nbase {
		return nil
	}
	if n.dir {
		// Refuse to move a directory into itself.
		for _, c := range m.ancestors(newname) {
			if c == n {
				return lerr(syscall.EINVAL)
			}
		}
	}
	if old, ok := nd.children[nbase]; ok {
		switch {
		case old.dir && !n.dir:
			return lerr(syscall.EISDIR)
		case !old.dir && n.dir:
			return lerr(syscall.ENOTDIR)
		case old.dir && len(old.children) > 0:
			return lerr(syscall.ENOTEMPTY)
		}
	}
	delete(od.children, obase)
	nd.children[nbase] = n
	return nil
}

// ancestors lists the directories on the way to name's parent. Called with
// m.mu held.
func (m *Mem) ancestors(name string) []*node {
	parts, _ := split(name)
	out := []*node{m.root}
	n := m.root
	for _, p := range parts {
		c, ok := n.children[p]
		if !ok || !c.dir {
			break
		}
		out = append(out, c)
		n = c
	}
	return out
}

// Remove implements FS.
func (m *Mem) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpRemove, name); err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	d, base, err := m.parent(name)
	if err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	n, ok := d.children[base]
	if !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOENT}
	}
	if n.dir && len(n.children) > 0 {
		return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	delete(d.children, base)
	return nil
}

// MkdirAll implements FS. New directories are durable only after SyncDir
// of their parents.
func (m *Mem) MkdirAll(dir string, _ os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpMkdirAll, dir); err != nil {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	parts, err := split(dir)
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	n := m.root
	for _, p := range parts {
		c, ok := n.children[p]
		switch {
		case !ok:
			c = newDir()
			c.mtime = time.Now()
			n.children[p] = c
		case !c.dir:
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		n = c
	}
	return nil
}

// ReadDir implements FS.
func (m *Mem) ReadDir(dir string) ([]fs.DirEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpReadDir, dir); err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: err}
	}
	d, err := m.lookup(dir)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: err}
	}
	if !d.dir {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: syscall.ENOTDIR}
	}
	names := slices.Sorted(maps.Keys(d.children))
	out := make([]fs.DirEntry, len(names))
	for i, name := range names {
		out[i] = fs.FileInfoToDirEntry(info(name, d.children[name]))
	}
	return out, nil
}

// Stat implements FS.
func (m *Mem) Stat(name string) (fs.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpStat, name); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	n, err := m.lookup(name)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return info(filepath.Base(name), n), nil
}

// SyncDir implements FS.
func (m *Mem) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(OpSyncDir, dir); err != nil {
		return &fs.PathError{Op: "sync", Path: dir, Err: err}
	}
	d, err := m.lookup(dir)
	if err != nil {
		return &fs.PathError{Op: "sync", Path: dir, Err: err}
	}
	if !d.dir {
		return &fs.PathError{Op: "sync", Path: dir, Err: syscall.ENOTDIR}
	}
	d.durable = maps.Clone(d.children)
	return nil
}

// memFile is an open file of a Mem.
type memFile struct {
	m      *Mem
	n      *node
	name   string
	gen    int
	write  bool
	off    int
	closed bool
}

// usable checks the handle and runs the injector. Called with m.mu held.
func (f *memFile) usable(op Op, what string) error {
	if f.closed || f.gen != f.m.gen {
		return &fs.PathError{Op: what, Path: f.name, Err: fs.ErrClosed}
	}
	if err := f.m.check(op, f.name); err != nil {
		return &fs.PathError{Op: what, Path: f.name, Err: err}
	}
	return nil
}

func (f *memFile) Read(p []byte) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.usable(OpRead, "read"); err != nil {
		return 0, err
	}
	if f.off >= len(f.n.data) {
		return 0, io.EOF
	}
	k := copy(p, f.n.data[f.off:])
	f.off += k
	return k, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.usable(OpWrite, "write"); err != nil {
		return 0, err
	}
	if !f.write {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: syscall.EBADF}
	}
	if end := f.off + len(p); end > len(f.n.data) {
		f.n.data = append(f.n.data, make([]byte, end-len(f.n.data))...)
	}
	copy(f.n.data[f.off:], p)
	f.off += len(p)
	f.n.mtime = time.Now()
	return len(p), nil
}

func (f *memFile) Sync() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.usable(OpSync, "sync"); err != nil {
		return err
	}
	f.n.synced = slices.Clone(f.n.data)
	return nil
}

func (f *memFile) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.name, Err: fs.ErrClosed}
	}
	err := f.usable(OpClose, "close")
	f.closed = true // a failed close still releases the handle, as close(2) does
	return err
}

// memInfo is a Mem node's fs.FileInfo.
type memInfo struct {
	name  string
	size  int64
	dir   bool
	mtime time.Time
}

func info(name string, n *node) memInfo {
	return memInfo{name: name, size: int64(len(n.data)), dir: n.dir, mtime: n.mtime}
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) ModTime() time.Time { return i.mtime }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}

// Lock is Locker's: an exclusive lock of name, created if missing, until
// unlock is called (a test's way of ending its holder's process).
func (m *Mem) Lock(name string) (unlock func() error, err error) {
	if _, err := m.Stat(name); errors.Is(err, fs.ErrNotExist) {
		f, err := m.Create(name)
		if err != nil {
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[name] {
		return nil, fmt.Errorf("%w: %s", ErrLockHeld, name)
	}
	if m.locks == nil {
		m.locks = map[string]bool{}
	}
	m.locks[name] = true
	var once sync.Once
	return func() error {
		once.Do(func() {
			m.mu.Lock()
			delete(m.locks, name)
			m.mu.Unlock()
		})
		return nil
	}, nil
}

// LockHeld is Locker's.
func (m *Mem) LockHeld(name string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.locks[name], nil
}
