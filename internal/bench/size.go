package bench

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrSize is wrapped by every error of the size parsers.
var ErrSize = errors.New("bench: bad size")

// MaxBytes bounds a dense variable: the largest gRPC message is 1 GiB.
const MaxBytes = 1 << 30

// MaxKeys bounds the keys of a sparse operation.
const MaxKeys = 100_000_000

// ParseBytes parses a byte size: a whole number with an optional binary
// suffix K, M or G (KiB, MiB, GiB; any case, "B" or "iB" may follow), so
// "1M" is 1048576. A dense size must be a positive multiple of 4 (whole
// float32s) of at most MaxBytes.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	binary := strings.HasSuffix(t, "iB")
	t = strings.TrimSuffix(strings.TrimSuffix(t, "iB"), "B")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > MaxBytes/mult || (binary && mult == 1) {
		return 0, fmt.Errorf("%w: %q is not a byte size between 4 and 1G (like 1M, 16M, 4096)", ErrSize, s)
	}
	n *= mult
	if n%4 != 0 {
		return 0, fmt.Errorf("%w: %q is %d bytes, not a whole number of float32 (a multiple of 4)", ErrSize, s, n)
	}
	return n, nil
}

// ParseKeys parses a key count: a whole number with an optional decimal
// suffix k (thousand) or M (million), any case, so "100k" is 100000 and
// "1M" is 1000000 (not 2^20: these count keys, not bytes).
func ParseKeys(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'k', 'K':
			mult = 1_000
		case 'm', 'M':
			mult = 1_000_000
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > MaxKeys/mult {
		return 0, fmt.Errorf("%w: %q is not a key count between 1 and 100M (like 100k, 1M, 5000)", ErrSize, s)
	}
	return n * mult, nil
}

// ParseList splits a comma-separated list and parses each item. An empty
// list, or an empty item, is an error.
func ParseList(s string, parse func(string) (int64, error)) ([]int64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: empty list", ErrSize)
	}
	var out []int64
	for item := range strings.SplitSeq(s, ",") {
		n, err := parse(item)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// ParseDim parses a row width: a whole number from 1 to 65536.
func ParseDim(s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 1 || n > 1<<16 {
		return 0, fmt.Errorf("%w: %q is not a row width between 1 and 65536", ErrSize, s)
	}
	return n, nil
}

// FormatBytes writes a byte count the way ParseBytes reads it, when exact
// ("16MiB"), and as a plain number otherwise.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// FormatKeys writes a key count the way ParseKeys reads it, when exact.
func FormatKeys(n int64) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000 && n%1_000 == 0:
		return fmt.Sprintf("%dk", n/1_000)
	}
	return strconv.FormatInt(n, 10)
}
