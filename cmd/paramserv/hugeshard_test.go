package main

import (
	"crypto/sha256"
	le "encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/vfs"
)

// growShard makes shard 0 of the checkpoint at step under dir a file of
// size bytes (a sparse file: a hole after its data), with a manifest that
// records its size and its checksum as a writer would have: consistent,
// and small on disk. It skips the test where the filesystem cannot hold
// such a file.
func growShard(t *testing.T, dir string, step, size int64) {
	t.Helper()
	m, err := checkpoint.Load(vfs.OS, dir, step)
	if err != nil {
		t.Fatal(err)
	}
	cdir := filepath.Join(dir, checkpoint.CheckpointName(step))
	path := filepath.Join(cdir, m.Shards[0].File)
	if err := os.Truncate(path, size); err != nil {
		t.Skipf("no sparse file of %d bytes here: %v", size, err)
	}
	// checkpoint.ChecksumCRC32C4M: the SHA-256 of each 4 MiB piece's
	// CRC-32C. Every piece but the first is all zeros.
	const piece = 4 << 20
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, piece)
	_, err = io.ReadFull(f, first)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	table := crc32.MakeTable(crc32.Castagnoli)
	zeros := crc32.Checksum(make([]byte, piece), table)
	sums := le.BigEndian.AppendUint32(nil, crc32.Checksum(first, table))
	for range size/piece - 1 {
		sums = le.BigEndian.AppendUint32(sums, zeros)
	}
	sum := sha256.Sum256(sums)
	if err := os.Remove(filepath.Join(cdir, checkpoint.ManifestName)); err != nil {
		t.Fatal(err)
	}
	m.Shards[0].Size = size
	m.Shards[0].Checksum = checkpoint.ChecksumCRC32C4M + ":" + hex.EncodeToString(sum[:])
	if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
		t.Fatal(err)
	}
}

// Issue 28, item 8: a checkpoint whose shard file claims 1 TiB, with a
// manifest that agrees (size and checksum) and a small header, is reported
// from its header by the real binary: ckpt ls marks it damaged, ckpt
// inspect, eval and export exit non-zero naming it, and a ps starting
// from the directory sets it aside and restores the checkpoint before it.
// Before, each read the whole TiB first: over 60 s each, and 4.5 minutes
// for the ps. There is no time limit here; the test logs each command's
// time.
func TestHugeShardAgainstTheBinary(t *testing.T) {
	ck := linregCheckpoint(t)
	growShard(t, ck, 20, 1<<40)
	const header = "after the end of the last tensor's data (the 1099511627776-byte file was not read further)"
	run := func(args ...string) (int, string) {
		t.Helper()
		began := time.Now()
		code, out, errOut := runCLI(t, nil, args...)
		t.Logf("%s: exit %d in %s", strings.Join(args, " "), code, time.Since(began).Round(time.Millisecond))
		if strings.Contains(errOut, "goroutine ") {
			t.Fatalf("%v panicked:\n%s", args, errOut)
		}
		return code, out + errOut
	}
	// ls lists: it exits 0 with the checkpoint's status damaged.
	huge := filepath.Join(ck, "ckpt-20")
	for _, dir := range []string{ck, huge} {
		code, out := run("ckpt", "ls", dir)
		if line := lineOf(out, "ckpt-20 "); code != 0 || !strings.Contains(line, "1.0 TiB") || !strings.Contains(line, "damaged: shard-0-of-1.safetensors: ") || !strings.Contains(line, header) {
			t.Errorf("ckpt ls %s: exit %d, want 0 with ckpt-20 damaged by its header:\n%s", dir, code, out)
		}
	}
	if code, out := run("ckpt", "inspect", huge); code != 1 || !strings.Contains(out, header) {
		t.Errorf("ckpt inspect: exit %d, want 1 naming the header:\n%s", code, out)
	}
	if code, out := run("eval", "--checkpoint_dir="+huge, "--model=linreg"); code != 1 || !strings.Contains(out, header) {
		t.Errorf("eval: exit %d, want 1 naming the header:\n%s", code, out)
	}
	if code, out := run("export", "--checkpoint_dir="+huge, "--out="+filepath.Join(t.TempDir(), "model.safetensors")); code != 1 || !strings.Contains(out, header) {
		t.Errorf("export: exit %d, want 1 naming the header:\n%s", code, out)
	}

	hosts := freeHosts(t, 2)
	began := time.Now()
	ps := start(t, "ps0", nil, append(clusterArgs(hosts[:1], hosts[1:], "ps", 0), "--checkpoint_dir="+ck)...)
	ps.waitFor(t, "serving on", 5*time.Minute)
	t.Logf("ps start: serving in %s", time.Since(began).Round(time.Millisecond))
	if out := ps.output(); !strings.Contains(out, "checkpoint: ckpt-20 damaged: shard-0-of-1.safetensors: ") || !strings.Contains(out, header+"; set aside as ckpt-20.set-aside-") ||
		!strings.Contains(out, "restored checkpoint of step 10 ") {
		t.Errorf("the ps does not say it set ckpt-20 aside for its header and restored ckpt-10:\n%s", out)
	}
	// It serves: a worker trains on from step 10 and the ps exits 0.
	w := start(t, "worker0", nil, append(clusterArgs(hosts[:1], hosts[1:], "worker", 0), "--train_steps=30", "--checkpoint_dir="+ck)...)
	if code := w.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("worker: exit %d", code)
	}
	if code := ps.wait(t, time.Minute); code != 0 {
		t.Fatalf("ps: exit %d", code)
	}
}

// lineOf is the first line of out that starts with prefix, or "".
func lineOf(out, prefix string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}
