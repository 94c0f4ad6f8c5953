package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/vfs"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// lockLog collects log lines.
type lockLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockLog) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *lockLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// holder is one chief in a lock test: its host, pid, and a heartbeat it
// drives by hand.
type holder struct {
	cfg  lockConfig
	tick chan time.Time
	beat chan struct{}
	log  *lockLog
}

// newHolder describes a chief of job owner on host; alive says which
// pids of its host are running.
func newHolder(fsys vfs.FS, dir, owner, host string, pid int, c *clock, alive map[int]bool) *holder {
	h := &holder{tick: make(chan time.Time), beat: make(chan struct{}), log: &lockLog{}}
	h.cfg = lockConfig{
		fs: fsys, dir: dir, owner: owner, logf: h.log.logf, now: c.now,
		self:      lockInfo{Host: host, PID: pid, PIDStart: "100", BootID: "boot-" + host},
		heartbeat: time.Second, staleAfter: time.Minute,
		tick: h.tick, beat: func() { h.beat <- struct{}{} },
		alive: func(pid int, start string) (bool, bool) { return alive[pid] && start == "100", true },
		sleep: func(time.Duration) {},
	}
	return h
}

func (h *holder) lock() (func() error, error) { return lock(h.cfg) }

// heartbeat runs one heartbeat of a holder and waits for it.
func (h *holder) heartbeat() {
	h.tick <- time.Time{}
	<-h.beat
}

// TestLockRefusesAnotherJob is failure 16 of issue 12: two jobs given the
// same checkpoint directory; the second is refused at start, naming the
// directory and the holder, and takes it once the first is done.
func TestLockRefusesAnotherJob(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		c := &clock{t: time.Now()}
		alive := map[int]bool{10: true, 20: true}
		a := newHolder(fsys, dir, "job-a", "h1", 10, c, alive)
		b := newHolder(fsys, dir, "job-b", "h1", 20, c, alive)
		unlockA, err := a.lock()
		if err != nil {
			t.Fatal(err)
		}
		c.add(time.Hour) // a live process on this host needs no heartbeat
		_, err = b.lock()
		if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "--checkpoint_dir "+dir+" is held by job job-a (pid 10 on h1, started ") {
			t.Fatalf("second job's Lock: %v", err)
		}
		if err := unlockA(); err != nil {
			t.Fatal(err)
		}
		if err := unlockA(); err != nil {
			t.Fatalf("second unlock: %v", err)
		}
		if _, err := fsys.Stat(filepath.Join(dir, LockName)); err == nil {
			t.Fatal("the lock file is still there after unlock")
		}
		unlockB, err := b.lock()
		if err != nil {
			t.Fatalf("Lock after the first job ended: %v", err)
		}
		if err := unlockB(); err != nil {
			t.Fatal(err)
		}
		if a.log.String()+b.log.String() != "" {
			t.Errorf("logs: %s / %s", a.log, b.log)
		}
	})
}

// TestLockSameJobTakesBack: a restarted chief of the same job (the same
// owner) gets its lock back at once, even from a live process; the old
// holder notices at its next heartbeat.
func TestLockSameJobTakesBack(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		c := &clock{t: time.Now()}
		alive := map[int]bool{10: true, 11: true}
		old := newHolder(fsys, dir, "job-a", "h1", 10, c, alive)
		unlockOld, err := old.lock()
		if err != nil {
			t.Fatal(err)
		}
		restarted := newHolder(fsys, dir, "job-a", "h1", 11, c, alive)
		unlock, err := restarted.lock()
		if err != nil {
			t.Fatal(err)
		}
		if got := restarted.log.String(); !strings.HasPrefix(got, "checkpoint: taking over the lock of "+dir+" from job job-a (pid 10 on h1") || !strings.HasSuffix(got, "an earlier run of this job") {
			t.Errorf("log: %s", got)
		}
		old.tick <- time.Time{} // its heartbeat finds the lock gone, and stops
		if err := unlockOld(); err == nil || !strings.Contains(err.Error(), "taken over") {
			t.Errorf("old holder's unlock: %v", err)
		}
		if got := old.log.String(); !strings.Contains(got, "checkpoint: lost the lock of "+dir+": it is now held by job job-a (pid 11 on h1") {
			t.Errorf("old holder's log: %s", got)
		}
		restarted.heartbeat()
		if err := unlock(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLockStale: the lock of a crashed chief is taken over: at once on its
// own host when its process is gone or the host restarted, and from
// another host once it has been silent for staleAfter; a heartbeat keeps
// it alive.
func TestLockStale(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		c := &clock{t: time.Now()}
		alive := map[int]bool{10: true, 20: true}
		a := newHolder(fsys, dir, "job-a", "h1", 10, c, alive)
		unlockA, err := a.lock()
		if err != nil {
			t.Fatal(err)
		}
		// From another host: alive while it beats.
		other := newHolder(fsys, dir, "job-b", "h2", 10, c, alive)
		for range 3 {
			c.add(50 * time.Second)
			a.heartbeat()
			if _, err := other.lock(); !errors.Is(err, ErrLocked) {
				t.Fatalf("another host took a lock with a heartbeat: %v", err)
			}
		}
		c.add(30 * time.Second)
		if _, err := other.lock(); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "last heartbeat 30s ago") {
			t.Fatalf("another host, 30s after a heartbeat: %v", err)
		}
		// Crash: no more heartbeats (the goroutine stops, the file stays).
		c.add(31 * time.Second)
		unlockB, err := other.lock()
		if err != nil {
			t.Fatalf("another host, 61s after the last heartbeat: %v", err)
		}
		if got := other.log.String(); !strings.Contains(got, "from job job-a (pid 10 on h1") || !strings.HasSuffix(got, ", silent for 1m1s") {
			t.Errorf("log: %s", got)
		}
		if err := unlockA(); err == nil {
			t.Error("unlock of a lock taken over succeeded")
		}

		// On its own host: gone at once when its process is.
		c.add(time.Hour)
		same := newHolder(fsys, dir, "job-c", "h2", 30, c, alive)
		_, err = same.lock()
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("same host, holder's process alive: %v", err)
		}
		alive[10] = false // job-b's chief is pid 10 on h2
		unlockC, err := same.lock()
		if err != nil {
			t.Fatalf("same host, holder's process gone: %v", err)
		}
		if got := same.log.String(); !strings.HasSuffix(got, "whose process 10 is gone") {
			t.Errorf("log: %s", got)
		}
		if err := unlockB(); err == nil {
			t.Error("unlock of a lock taken over succeeded")
		}
		// A host restart: every lock of that host from before is stale.
		rebooted := newHolder(fsys, dir, "job-d", "h2", 30, c, alive)
		rebooted.cfg.self.BootID = "boot-h2-again"
		unlockD, err := rebooted.lock()
		if err != nil {
			t.Fatalf("after a restart of the host: %v", err)
		}
		if got := rebooted.log.String(); !strings.HasSuffix(got, "from before this host restarted") {
			t.Errorf("log: %s", got)
		}
		if err := unlockC(); err == nil {
			t.Error("unlock of a lock taken over succeeded")
		}
		if err := unlockD(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLockUnreadable: a lock file that does not parse (a holder writing
// it, or garbage) is held until it is older than staleAfter.
func TestLockUnreadable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	c := &clock{t: time.Now()}
	h := newHolder(vfs.OS, dir, "job-a", "h1", 10, c, nil)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, LockName)
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	slept := 0
	h.cfg.sleep = func(time.Duration) { slept++ }
	if _, err := h.lock(); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "is held by an unreadable lock file paramserv.lock, last written 0s ago") || slept == 0 {
		t.Fatalf("Lock with a fresh unreadable lock file: %v (looked again %d times)", err, slept)
	}
	old := c.now().Add(-2 * time.Minute)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	unlock, err := h.lock()
	if err != nil {
		t.Fatal(err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
}

// TestLockConcurrent: of chiefs of several jobs starting at once, exactly
// one gets the lock.
func TestLockConcurrent(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		const n = 8
		c := &clock{t: time.Now()}
		alive := map[int]bool{}
		for i := range n {
			alive[i] = true
		}
		unlocks := make([]func() error, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			h := newHolder(fsys, dir, fmt.Sprintf("job-%d", i), "h1", i, c, alive)
			wg.Go(func() { unlocks[i], errs[i] = h.lock() })
		}
		wg.Wait()
		won := 0
		for i := range n {
			switch {
			case errs[i] == nil:
				won++
				defer unlocks[i]()
			case !errors.Is(errs[i], ErrLocked):
				t.Errorf("chief %d: %v", i, errs[i])
			}
		}
		if won != 1 {
			t.Fatalf("%d chiefs got the lock", won)
		}
	})
}

// TestLockReal runs Lock as the chief does, with this process's identity:
// a second job on this host is refused while the first runs.
func TestLockReal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	unlock, err := Lock(vfs.OS, dir, JobID([]string{"127.0.0.1:1"}, []string{"127.0.0.1:2"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	_, err = Lock(vfs.OS, dir, JobID([]string{"127.0.0.1:3"}, []string{"127.0.0.1:2"}), nil)
	if want := fmt.Sprintf("pid %d on %s", os.Getpid(), host); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), want) {
		t.Fatalf("second job: %v; want ErrLocked naming %s", err, want)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
}

func TestProcAlive(t *testing.T) {
	start, ok := procStart(os.Getpid())
	if !ok {
		t.Skip("no /proc")
	}
	if alive, known := procAlive(os.Getpid(), start); !alive || !known {
		t.Errorf("this process: %v, %v", alive, known)
	}
	if alive, _ := procAlive(os.Getpid(), start+"1"); alive {
		t.Error("a pid reused by another process counts as the holder")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	if alive, known := procAlive(cmd.Process.Pid, start); alive || !known {
		t.Errorf("an exited process: %v, %v", alive, known)
	}
	if bootID() == "" {
		t.Error("no boot id")
	}
}

func TestJobID(t *testing.T) {
	a := JobID([]string{"127.0.0.1:2222"}, []string{"127.0.0.1:2223", "127.0.0.1:2224"})
	if a != JobID([]string{"127.0.0.1:2222"}, []string{"127.0.0.1:2223", "127.0.0.1:2224"}) || !strings.HasPrefix(a, "job-") || len(a) != 16 {
		t.Errorf("JobID = %q", a)
	}
	for _, b := range []string{
		JobID([]string{"127.0.0.1:3222"}, []string{"127.0.0.1:2223", "127.0.0.1:2224"}),
		JobID([]string{"127.0.0.1:2222", "127.0.0.1:2223"}, []string{"127.0.0.1:2224"}),
	} {
		if a == b {
			t.Errorf("two clusters share the id %s", a)
		}
	}
}

// Held says whether another job holds a directory's lock, without taking
// it: a ps checks it before it reads a checkpoint.
func TestHeldWithoutTaking(t *testing.T) {
	dir := t.TempDir()
	if err := Held(vfs.OS, dir, "job-b"); err != nil {
		t.Fatalf("no lock: %v", err)
	}
	unlock, err := Lock(vfs.OS, dir, "job-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Held(vfs.OS, dir, "job-b"); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "job-a") {
		t.Fatalf("held by job-a, asked by job-b: %v, want ErrLocked naming job-a", err)
	}
	if err := Held(vfs.OS, dir, "job-a"); err != nil {
		t.Fatalf("held by job-a, asked by job-a (a restarted ps of the same job): %v", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	if err := Held(vfs.OS, dir, "job-b"); err != nil {
		t.Fatalf("after unlock: %v", err)
	}
}

// kernelLocker is a holder's view of a vfs.Locker: kill ends the
// holder's process as far as the kernel's locks go (they are dropped),
// leaving its lock file as it was.
type kernelLocker struct {
	vfs.Locker
	mu      sync.Mutex
	release []func() error
}

func (k *kernelLocker) Lock(name string) (func() error, error) {
	unlock, err := k.Locker.Lock(name)
	if err == nil {
		k.mu.Lock()
		k.release = append(k.release, unlock)
		k.mu.Unlock()
	}
	return unlock, err
}

func (k *kernelLocker) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.release {
		r()
	}
}

// TestLockKernel: where the filesystem keeps locks, a holder on this host
// whose process ended (its kernel lock dropped) is gone at once though its
// pid still shows (a zombie), a holder whose kernel lock is held is alive
// even with a stale heartbeat, and a holder on another host whose kernel
// lock is free is still waited for until its heartbeat is stale (a nolock
// NFS mount's locks are each host's own).
func TestLockKernel(t *testing.T) {
	fsys := vfs.NewMem()
	dir := "/ck"
	c := &clock{t: time.Now()}
	alive := map[int]bool{10: true, 20: true, 30: true}
	holderOn := func(owner, host string, pid int) (*holder, *kernelLocker) {
		h := newHolder(fsys, dir, owner, host, pid, c, alive)
		k := &kernelLocker{Locker: fsys}
		h.cfg.locker = k
		return h, k
	}
	a, ka := holderOn("job-a", "h1", 10)
	if _, err := a.lock(); err != nil {
		t.Fatal(err)
	}
	// Alive: refused, even once its heartbeat is stale.
	b, kb := holderOn("job-b", "h1", 20)
	c.add(time.Hour)
	if _, err := b.lock(); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "job job-a (pid 10 on h1") {
		t.Fatalf("a holder holding its kernel lock, silent for an hour: %v, want ErrLocked naming job-a", err)
	}
	if err := heldBy(fsys, dir, "job-b", b.cfg); !errors.Is(err, ErrLocked) {
		t.Fatalf("Held, a holder holding its kernel lock: %v", err)
	}
	// Killed (pid 10 still shows): taken over at once.
	ka.kill()
	if err := heldBy(fsys, dir, "job-b", b.cfg); err != nil {
		t.Fatalf("Held, a holder whose process ended: %v", err)
	}
	if _, err := b.lock(); err != nil {
		t.Fatalf("a holder whose process ended: %v", err)
	}
	if got := b.log.String(); !strings.HasSuffix(got, "whose process 10 has ended (the kernel let go of its lock of paramserv.lock.held)") {
		t.Errorf("log: %s", got)
	}
	// From another host, its kernel lock free: the heartbeat decides.
	kb.kill()
	other, _ := holderOn("job-c", "h2", 30)
	if _, err := other.lock(); !errors.Is(err, ErrLocked) {
		t.Fatalf("another host's holder with a fresh heartbeat: %v", err)
	}
	c.add(2 * time.Minute)
	unlock, err := other.lock()
	if err != nil {
		t.Fatalf("another host's holder silent for 2 minutes: %v", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	if held, _ := fsys.LockHeld(filepath.Join(dir, HeldName)); held {
		t.Error("unlock kept the kernel lock")
	}
}

// heldBy is Held with a test holder's clock, identity and locker.
func heldBy(fsys vfs.FS, dir, owner string, cfg lockConfig) error {
	cfg.owner = owner
	cfg.self.Owner = owner
	return held(cfg)
}

// A ps's Held while its chief takes over a dead job's lock: the chief
// holds the kernel lock before it rewrites the lock file, which still
// names the dead job for that moment. Held looks again, and then judges
// the file's holder by its process: gone, so the lock would be taken
// over, and the ps goes on (before, it refused the directory, exit 2:
// seen in CI when a job started right after kill -9 of the one before).
func TestHeldWhileAChiefTakesOver(t *testing.T) {
	fsys := vfs.NewMem()
	dir := "/ck"
	c := &clock{t: time.Now()}
	alive := map[int]bool{10: true, 20: true}
	a := newHolder(fsys, dir, "job-a", "h1", 10, c, alive)
	ka := &kernelLocker{Locker: fsys}
	a.cfg.locker = ka
	if _, err := a.lock(); err != nil {
		t.Fatal(err)
	}
	ka.kill()
	alive[10] = false
	// The new chief (job-b) has the kernel lock, not yet the file.
	release, err := fsys.Lock(filepath.Join(dir, HeldName))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ps := newHolder(fsys, dir, "job-b", "h1", 20, c, alive)
	ps.cfg.locker = fsys
	looks := 0
	ps.cfg.sleep = func(time.Duration) { looks++ }
	if err := heldBy(fsys, dir, "job-b", ps.cfg); err != nil {
		t.Fatalf("Held while job-b's chief takes over from dead job-a: %v, want nil", err)
	}
	if looks != lockSettleTries {
		t.Errorf("looked again %d times, want %d", looks, lockSettleTries)
	}
	// The same moment with job-a's process alive (a zombie's pid shows):
	// refused, as before.
	alive[10] = true
	if err := heldBy(fsys, dir, "job-b", ps.cfg); !errors.Is(err, ErrLocked) {
		t.Fatalf("Held, the file's holder alive: %v, want ErrLocked", err)
	}
}
