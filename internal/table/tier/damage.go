package tier

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// Damaged reports whether err, a failure of the tier, is its store found
// damaged (a row of the hash store whose checksum is wrong; pebble's
// corruption: a table file whose checksum or format is wrong, or a file
// missing) rather than a disk that failed or filled up.
// The rows on disk are then lost, but nothing else is: the ps restarts
// and restores its shard from the newest checkpoint (docs/TIERS.md). It
// returns err worded for a person (pebble's error carries a line of its
// own that says nothing), naming the store's directory.
func (m *Manager) Damaged(err error) (error, bool) {
	if err == nil || !isCorruption(err) {
		return err, false
	}
	msg := strings.ReplaceAll(err.Error(), "\n<corruption detail carrier>", "")
	if !strings.Contains(msg, m.cfg.Dir) {
		msg = fmt.Sprintf("%s (the store in %s)", msg, m.cfg.Dir)
	}
	return &damagedError{msg: msg, err: err}, true
}

// damagedError is a damaged store's error, its message cleaned.
type damagedError struct {
	msg string
	err error
}

func (e *damagedError) Error() string { return e.msg }
func (e *damagedError) Unwrap() error { return e.err }

// isCorruption walks err's chain, multiple wraps included, for a damaged
// row or pebble's corruption mark (which the standard errors.Is does not
// see).
func isCorruption(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errDamaged) || pebble.IsCorruptionError(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if isCorruption(e) {
				return true
			}
		}
		return false
	}
	return isCorruption(errors.Unwrap(err))
}
