package secure

import (
	"strings"
	"testing"
)

// A token file that never ends is refused after a few kilobytes, not read
// into memory (before, --auth_token_file=/dev/zero read without bound).
func TestTokenFileBounded(t *testing.T) {
	_, err := readToken("/dev/zero")
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("readToken(/dev/zero) = %v, want an error saying it is too long", err)
	}
}
