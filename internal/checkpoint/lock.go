package checkpoint

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/paramserv/paramserv/internal/vfs"
)

// LockName is the lock file a job's chief holds in its checkpoint
// directory. Readers of checkpoints ignore it.
const LockName = "paramserv.lock"

// HeldName is the file whose kernel lock (vfs.Locker) the chief holds
// while it holds LockName, where the filesystem keeps locks: the kernel
// drops it when the chief's process ends, however it ends, so a job
// started right after a kill -9 on the same host takes the directory at
// once. It is created once and never removed (removing a file others may
// have open would let two holders lock two files of one name).
const HeldName = "paramserv.lock.held"

// The lock's heartbeat: the holder rewrites the lock file every
// LockHeartbeat, and a lock held from another host whose file has not been
// rewritten for LockStaleAfter is taken as abandoned.
const (
	LockHeartbeat  = 10 * time.Second
	LockStaleAfter = 6 * LockHeartbeat
)

// ErrLocked: the checkpoint directory is held by another job.
var ErrLocked = errors.New("checkpoint: directory in use by another job")

// JobID names a job by its cluster: the same ps and worker addresses give
// the same id, so a restarted chief of a job takes its own lock back, while
// another job (another address, another port) is refused.
func JobID(ps, workers []string) string {
	h := sha256.Sum256([]byte("ps=" + strings.Join(ps, ",") + ";workers=" + strings.Join(workers, ",")))
	return "job-" + hex.EncodeToString(h[:6])
}

// lockInfo is the lock file's content.
type lockInfo struct {
	Owner string `json:"owner"`
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	// PIDStart is the process's start time in clock ticks since boot
	// (/proc/<pid>/stat field 22) and BootID the kernel's boot id, so a
	// reader on the same host can tell the holder from a later process
	// that reuses its pid, and a lock from before a reboot.
	PIDStart  string    `json:"pid_start,omitempty"`
	BootID    string    `json:"boot_id,omitempty"`
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
	// Token tells this holder from any other holder of the same owner.
	Token string `json:"token"`
	// Kernel says the holder holds HeldName's kernel lock: on its own
	// host, that lock free means the holder's process has ended.
	Kernel bool `json:"kernel_lock,omitempty"`
}

func (l lockInfo) describe(now time.Time) string {
	return fmt.Sprintf("%s (pid %d on %s, started %s, last heartbeat %s ago)",
		l.Owner, l.PID, l.Host, l.Started.UTC().Format(time.RFC3339), now.Sub(l.Heartbeat).Round(time.Second))
}

// lockConfig is Lock's, with its clock and its view of processes
// replaceable by tests.
type lockConfig struct {
	fs         vfs.FS
	dir, owner string
	logf       func(format string, args ...any)
	now        func() time.Time
	self       lockInfo // Owner, Host, PID, PIDStart, BootID
	heartbeat  time.Duration
	staleAfter time.Duration
	// tick, when set, drives the heartbeat instead of a real ticker, and
	// beat, when set, is called after each heartbeat.
	tick <-chan time.Time
	beat func()
	// sleep waits before looking again at a lock file being written.
	sleep func(time.Duration)
	// alive reports whether the process pid that started at start is
	// running on this host; known is false when it cannot tell.
	alive func(pid int, start string) (alive, known bool)
	// locker, when set, keeps the kernel lock of HeldName (Lock and Held
	// set it where fs is a vfs.Locker); nil: the heartbeat and the
	// holder's pid alone say whether a holder lives.
	locker vfs.Locker
}

// kernelLock is what HeldName's kernel lock says of a holder.
type kernelLock int

const (
	kernelUnknown kernelLock = iota // no locks here, or not asked
	kernelBusy                      // another open file holds it: a process lives that holds it
	kernelFree                      // nobody held it (a caller that takes it holds it now)
)

// Lock takes the lock of the checkpoint directory dir for the job owner
// (see JobID): the chief calls it at start, before training, and calls
// unlock at the end. It creates dir if needed. While held, a goroutine
// rewrites the lock file every LockHeartbeat.
//
// If another job holds the lock, Lock fails with an error wrapping
// ErrLocked that names the directory and the holder. A lock is taken over,
// with a line to logf (which may be nil), when it is the same owner's (a
// restarted chief of the same job), or its holder is gone: on this host,
// its process is no longer running (or the host restarted since); from
// another host, its file has not been rewritten for LockStaleAfter.
//
// Where fsys keeps locks (vfs.Locker; Linux's local filesystems, and NFS
// unless mounted nolock), the holder also holds the kernel lock of
// HeldName: a holder whose process has ended, by kill -9 too, is gone at
// once on its own host (a process just killed may still show in /proc
// until its parent reaps it), and a holder whose kernel lock is held is
// alive, from any host. A holder on another host whose kernel lock is
// free still waits for LockStaleAfter: on a filesystem whose locks are
// each host's own (NFS mounted nolock), a free lock says nothing of
// another host, and only the heartbeat does.
//
// The lock guards against mistakes (two jobs given one directory), not
// against adversaries; two takers of one stale lock in the same instant
// can both believe they hold it until the next heartbeat, when the loser
// logs that it lost it.
func Lock(fsys vfs.FS, dir, owner string, logf func(format string, args ...any)) (unlock func() error, err error) {
	host, _ := os.Hostname()
	pid := os.Getpid()
	start, _ := procStart(pid)
	locker, _ := fsys.(vfs.Locker)
	return lock(lockConfig{
		fs: fsys, dir: dir, owner: owner, logf: logf, now: time.Now,
		self:      lockInfo{Owner: owner, Host: host, PID: pid, PIDStart: start, BootID: bootID()},
		heartbeat: LockHeartbeat, staleAfter: LockStaleAfter,
		alive: procAlive, sleep: time.Sleep, locker: locker,
	})
}

// Held reports, without taking it, whether another job holds the lock of
// dir: an error wrapping ErrLocked that names the holder, as Lock's, or
// nil when the lock is free, is owner's, or would be taken over. A ps calls
// it at start, before it reads any checkpoint, so that a second job given
// the same directory reads nothing of the first's.
func Held(fsys vfs.FS, dir, owner string) error {
	host, _ := os.Hostname()
	pid := os.Getpid()
	start, _ := procStart(pid)
	locker, _ := fsys.(vfs.Locker)
	return held(lockConfig{fs: fsys, dir: dir, owner: owner, now: time.Now,
		self:       lockInfo{Owner: owner, Host: host, PID: pid, PIDStart: start, BootID: bootID()},
		staleAfter: LockStaleAfter, alive: procAlive, locker: locker})
}

func held(cfg lockConfig) error {
	if cfg.sleep == nil {
		cfg.sleep = time.Sleep
	}
	path := filepath.Join(cfg.dir, LockName)
	var (
		why   string
		stale bool
	)
	for try := 0; ; try++ {
		_, held, mtime, err := readLock(cfg.fs, path)
		if err != nil {
			return nil // no lock (or none readable yet): the chief's Lock decides
		}
		if held.Token == "" {
			return nil
		}
		kernel := kernelUnknown
		if cfg.locker != nil {
			if busy, err := cfg.locker.LockHeld(filepath.Join(cfg.dir, HeldName)); err == nil {
				kernel = kernelFree
				if busy {
					kernel = kernelBusy
				}
			}
		}
		if why, stale = judge(cfg, cfg.self, held, mtime, kernel); stale || kernel != kernelBusy {
			break
		}
		// The kernel lock is held, but a chief taking over a dead job's
		// lock holds it before it writes its own lock file: the file
		// may still name the dead job. Look again for a while (the
		// taker writes at once); then judge the file's holder by the
		// rest of the evidence (its process, its host's boot, its
		// heartbeat) alone.
		if try == lockSettleTries {
			if _, gone := judge(cfg, cfg.self, held, mtime, kernelUnknown); gone {
				return nil
			}
			break
		}
		cfg.sleep(50 * time.Millisecond)
	}
	if stale {
		return nil
	}
	return fmt.Errorf("%w: --checkpoint_dir %s is held by %s; two jobs cannot share a checkpoint directory: give this one its own, or stop the other",
		ErrLocked, cfg.dir, why)
}

// lockSettleTries is how many times, 50 ms apart, Held looks again at a
// lock file whose kernel lock is held before it judges the file alone.
const lockSettleTries = 20

func lock(cfg lockConfig) (_ func() error, err error) {
	if cfg.logf == nil {
		cfg.logf = func(string, ...any) {}
	}
	if cfg.owner == "" {
		return nil, fmt.Errorf("%w: a lock needs an owner", ErrInvalid)
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	self := cfg.self
	self.Owner, self.Token = cfg.owner, hex.EncodeToString(tok[:])
	self.Started = cfg.now()
	self.Heartbeat = self.Started
	if err := mkdirAllDurable(cfg.fs, cfg.dir); err != nil {
		return nil, fmt.Errorf("checkpoint: lock %s: %w", cfg.dir, err)
	}
	path := filepath.Join(cfg.dir, LockName)
	// The kernel lock of HeldName, taken before the lock file is looked
	// at and given back on every way out but success.
	var release func() error
	noKernel := cfg.locker == nil // the heartbeat and pid alone
	defer func() {
		if err != nil && release != nil {
			release()
		}
	}()
	for try := 0; ; try++ {
		if try == 20 {
			return nil, fmt.Errorf("checkpoint: lock %s: the lock file keeps changing; is another job starting on it?", cfg.dir)
		}
		kernel := kernelUnknown
		switch {
		case release != nil:
			kernel = kernelFree
		case !noKernel:
			rel, err := cfg.locker.Lock(filepath.Join(cfg.dir, HeldName))
			switch {
			case err == nil:
				release, self.Kernel, kernel = rel, true, kernelFree
			case errors.Is(err, vfs.ErrLockHeld):
				kernel = kernelBusy
			case errors.Is(err, errors.ErrUnsupported):
				noKernel = true
				cfg.logf("checkpoint: %s keeps no file locks (%v): the lock of a job killed there is taken over once its process is gone, or after %s without a heartbeat from another host", cfg.dir, err, cfg.staleAfter)
			default:
				return nil, fmt.Errorf("checkpoint: lock %s: %w", cfg.dir, err)
			}
		}
		if kernel != kernelBusy {
			err := create(cfg.fs, path, self)
			if err == nil {
				if err := cfg.fs.SyncDir(cfg.dir); err != nil {
					return nil, fmt.Errorf("checkpoint: lock %s: %w", cfg.dir, err)
				}
				return hold(cfg, self, release), nil
			}
			if !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("checkpoint: lock %s: %w", cfg.dir, err)
			}
		}
		b, held, mtime, err := readLock(cfg.fs, path)
		if errors.Is(err, fs.ErrNotExist) {
			if kernel == kernelBusy {
				// Its holder is writing the lock file, or has just
				// removed it and is letting go: look again.
				cfg.sleep(50 * time.Millisecond)
			}
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint: lock %s: %w", cfg.dir, err)
		}
		why, stale := judge(cfg, self, held, mtime, kernel)
		if stale && kernel == kernelBusy {
			// The same job's earlier chief, whose process lives (a
			// chief restarted within one process): taken back, as
			// before kernel locks, and held without one.
			noKernel = true
		}
		if !stale {
			if held.Token == "" && try < 10 {
				cfg.sleep(50 * time.Millisecond) // being written: look again
				continue
			}
			return nil, fmt.Errorf("%w: --checkpoint_dir %s is held by %s; two jobs cannot share a checkpoint directory: give this one its own, or stop the other (%s)",
				ErrLocked, cfg.dir, why, "a lock whose holder died is taken over once its process is gone, or after "+cfg.staleAfter.String()+" without a heartbeat from another host")
		}
		// Take it over: move it aside (of several takers one succeeds),
		// and make sure what moved is what was judged.
		aside := path + "." + self.Token + ".stale"
		if err := cfg.fs.Rename(path, aside); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("checkpoint: lock %s: taking over: %w", cfg.dir, err)
		}
		moved, _, _, err := readLock(cfg.fs, aside)
		if err == nil && !bytes.Equal(moved, b) {
			// A newer lock appeared between the read and the rename:
			// put it back as it was.
			if f, err := cfg.fs.CreateExcl(path); err == nil {
				_, werr := f.Write(moved)
				if serr := f.Sync(); werr == nil {
					werr = serr
				}
				if cerr := f.Close(); werr == nil {
					werr = cerr
				}
				if werr != nil {
					cfg.logf("checkpoint: lock %s: putting back a lock taken by mistake: %v", cfg.dir, werr)
				}
			}
			cfg.fs.Remove(aside)
			continue
		}
		cfg.fs.Remove(aside)
		cfg.logf("checkpoint: taking over the lock of %s from %s", cfg.dir, why)
	}
}

// judge says whether the lock held can be taken over by self, and
// describes the holder either way; kernel is what HeldName's kernel lock
// says.
func judge(cfg lockConfig, self, held lockInfo, mtime time.Time, kernel kernelLock) (string, bool) {
	now := cfg.now()
	if held.Token == "" {
		// Unreadable: being written, or garbage. Go by the file's age.
		age := now.Sub(mtime).Round(time.Second)
		return fmt.Sprintf("an unreadable lock file %s, last written %s ago", LockName, age), age > cfg.staleAfter
	}
	// The freshest evidence of life: the holder's heartbeat or the file's
	// time, whichever is later (the clocks of two hosts may differ).
	last := held.Heartbeat
	if mtime.After(last) {
		last = mtime
	}
	who := "job " + held.describe(now)
	switch {
	case held.Owner == self.Owner:
		return who + ", an earlier run of this job", true
	case kernel == kernelBusy:
		return who, false // its process holds the kernel lock: alive
	case kernel == kernelFree && held.Kernel && held.Host == self.Host && held.BootID == self.BootID:
		return fmt.Sprintf("%s, whose process %d has ended (the kernel let go of its lock of %s)", who, held.PID, HeldName), true
	case held.Host == self.Host && held.BootID != "" && self.BootID != "":
		if held.BootID != self.BootID {
			return who + ", from before this host restarted", true
		}
		if alive, known := cfg.alive(held.PID, held.PIDStart); known {
			if !alive {
				return fmt.Sprintf("%s, whose process %d is gone", who, held.PID), true
			}
			return who, false
		}
	}
	if age := now.Sub(last); age > cfg.staleAfter {
		return fmt.Sprintf("%s, silent for %s", who, age.Round(time.Second)), true
	}
	return who, false
}

// create writes a new lock file at path, exclusively.
func create(fsys vfs.FS, path string, l lockInfo) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	f, err := fsys.CreateExcl(path)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fsys.Remove(path)
	}
	return err
}

// readLock reads a lock file; an unparseable one comes back as a zero
// lockInfo with its bytes and time.
func readLock(fsys vfs.FS, path string) ([]byte, lockInfo, time.Time, error) {
	fi, err := fsys.Stat(path)
	if err != nil {
		return nil, lockInfo{}, time.Time{}, err
	}
	f, err := fsys.Open(path)
	if err != nil {
		return nil, lockInfo{}, time.Time{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, lockInfo{}, time.Time{}, err
	}
	var l lockInfo
	if json.Unmarshal(b, &l) != nil {
		l = lockInfo{}
	}
	return b, l, fi.ModTime(), nil
}

// hold starts the heartbeat and returns the unlock function, which gives
// back the kernel lock (release, when not nil) last.
func hold(cfg lockConfig, self lockInfo, release func() error) func() error {
	path := filepath.Join(cfg.dir, LockName)
	stop, done := make(chan struct{}), make(chan struct{})
	tick := cfg.tick
	var ticker *time.Ticker
	if tick == nil {
		ticker = time.NewTicker(cfg.heartbeat)
		tick = ticker.C
	}
	lost := false
	// mine reports whether the lock file is still this holder's.
	mine := func() (lockInfo, bool) {
		_, l, _, err := readLock(cfg.fs, path)
		return l, err == nil && l.Token == self.Token
	}
	go func() {
		defer close(done)
		if ticker != nil {
			defer ticker.Stop()
		}
		for {
			select {
			case <-stop:
				return
			case <-tick:
			}
			if l, ok := mine(); !ok {
				who := "nobody"
				if l.Token != "" {
					who = "job " + l.describe(cfg.now())
				}
				cfg.logf("checkpoint: lost the lock of %s: it is now held by %s; another job may be writing checkpoints there", cfg.dir, who)
				lost = true
				return
			}
			self.Heartbeat = cfg.now()
			b, err := json.Marshal(self)
			if err != nil {
				continue
			}
			err = writeAtomic(cfg.fs, cfg.dir, LockName, func(w io.Writer) error {
				_, err := w.Write(append(b, '\n'))
				return err
			})
			if err != nil {
				cfg.logf("checkpoint: heartbeat of the lock of %s: %v", cfg.dir, err)
			}
			if cfg.beat != nil {
				cfg.beat()
			}
		}
	}()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			close(stop)
			<-done
			if release != nil {
				defer func() {
					if rerr := release(); err == nil && rerr != nil {
						err = fmt.Errorf("checkpoint: unlock %s: %w", cfg.dir, rerr)
					}
				}()
			}
			if lost {
				err = fmt.Errorf("checkpoint: unlock %s: the lock was taken over by another job while held", cfg.dir)
				return
			}
			if _, ok := mine(); !ok {
				err = fmt.Errorf("checkpoint: unlock %s: the lock file is no longer this job's", cfg.dir)
				return
			}
			if err = cfg.fs.Remove(path); err == nil {
				err = cfg.fs.SyncDir(cfg.dir)
			}
			if err != nil {
				err = fmt.Errorf("checkpoint: unlock %s: %w", cfg.dir, err)
			}
		})
		return err
	}
}

// procStart returns the start time of process pid, in clock ticks after
// boot, from /proc (Linux); ok is false elsewhere.
func procStart(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// the start time is field 22, the 20th after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}

// bootID is the kernel's boot id (Linux), "" elsewhere.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// procAlive reports whether pid runs and started at start.
func procAlive(pid int, start string) (alive, known bool) {
	if _, ok := procStart(os.Getpid()); !ok || start == "" {
		return false, false // no /proc here, or the holder had none
	}
	got, ok := procStart(pid)
	return ok && got == start, true
}
