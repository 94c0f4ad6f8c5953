package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/paramserv/paramserv/internal/trainer"
)

// tierFlags are the disk tier's flags (docs/TIERS.md).
type tierFlags struct {
	memory      string
	dir         string
	evictUnseen time.Duration
}

func defineTierFlags(fs *flag.FlagSet) *tierFlags {
	f := &tierFlags{}
	fs.StringVar(&f.memory, "table_memory", "", "sparse tables: the memory a ps keeps rows in (e.g. 2GiB, 512MiB, 0); the rest live on its disk under --table_dir, the coldest moved out, a row read from disk moved back in (default: every row in memory)")
	fs.StringVar(&f.dir, "table_dir", "", "with --table_memory: the directory of a ps's disk tier, emptied at start (default: tables-ps-N beside --checkpoint_dir, else a temporary directory the log names)")
	fs.DurationVar(&f.evictUnseen, "evict_unseen", 0, "sparse tables: drop rows not pushed for this long by the wall clock, in memory and on disk (0: never)")
	return f
}

// apply puts the flags into a ps's configuration.
func (f *tierFlags) apply(cfg *trainer.PSConfig, set func(string) bool) error {
	switch {
	case f.evictUnseen < 0:
		return fmt.Errorf("--evict_unseen=%s: want a duration >= 0 (0: never)", f.evictUnseen)
	case set("table_dir") && !set("table_memory"):
		return fmt.Errorf("--table_dir is read only with --table_memory")
	}
	cfg.TableDir, cfg.EvictUnseen = f.dir, f.evictUnseen
	if set("table_memory") {
		cfg.Tiered = true
		n, err := ParseSize(f.memory)
		if err != nil {
			return fmt.Errorf("--table_memory=%q: %w", f.memory, err)
		}
		cfg.TableMemory = n
	}
	if cfg.Tiered && cfg.MaxTableKeys > 0 {
		return fmt.Errorf("--max_table_keys counts the rows in memory, and --table_memory keeps rows past its budget on disk: give one of them")
	}
	if f.evictUnseen > 0 && !cfg.Tiered {
		return fmt.Errorf("--evict_unseen needs --table_memory (rows are timed by the disk tier's loop); give --table_memory large enough to keep every row in memory")
	}
	return nil
}

// ParseSize reads a size in bytes: a number with an optional unit B, KB,
// MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mul := map[string]float64{"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}[unit]
	x, err := strconv.ParseFloat(num, 64)
	if mul == 0 || err != nil || x < 0 || x*mul > 1<<62 {
		return 0, fmt.Errorf("want a size >= 0 such as 0, 512MiB, 2GiB or 1.5GB")
	}
	return int64(x * mul), nil
}
