package wire

import "github.com/paramserv/paramserv/internal/format"

// AllFinite reports whether no element of f is NaN or ±Inf
// (format.AllFinite: eight exponents an instruction with AVX2).
func AllFinite(f []float32) bool { return format.AllFinite(f) }

// FirstNonFinite returns the index of the first NaN or ±Inf in f, or -1
// if there is none.
func FirstNonFinite(f []float32) int { return format.FirstNonFinite(f) }
