package main

// The calls of a PyTorch training recipe (paramserv.torch): the workers'
// collective calls (barrier, all_reduce) and the program's own state saved
// with the chief's checkpoints and handed back on resume.

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"
)

// ps_collective makes the worker's next collective call (session.Collective):
// op "barrier" (n = 0), or "sum", "mean" or "max" of the n values, whose
// reduction over every worker is written to out (n doubles); it waits at
// most timeoutS seconds for the other workers.
//
//export ps_collective
func ps_collective(hd C.int64_t, op *C.char, values *C.double, n C.int64_t, out *C.double, timeoutS C.double) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	if n < 0 || (n > 0 && (values == nil || out == nil)) {
		return h.fail(errors.New("paramserv: collective call: NULL values"))
	}
	var in []float64
	if n > 0 {
		in = unsafe.Slice((*float64)(unsafe.Pointer(values)), int(n))
	}
	got, err := h.s.Collective(callCtx(), C.GoString(op), in, time.Duration(float64(timeoutS)*float64(time.Second)))
	if err != nil {
		return h.fail(err)
	}
	if len(got) != int(n) {
		return h.fail(fmt.Errorf("paramserv: collective call: %d values back for %d", len(got), n))
	}
	if n > 0 {
		copy(unsafe.Slice((*float64)(unsafe.Pointer(out)), int(n)), got)
	}
	return 0
}

// ps_defer_saves makes the chief's checkpoints carry the program's state
// (session.DeferSaves): after each step the program asks ps_save_due and,
// when it answers 1, calls ps_save_state.
//
//export ps_defer_saves
func ps_defer_saves(hd C.int64_t) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	h.s.DeferSaves()
	return 0
}

// ps_save_due returns 1 when the chief's checkpoint is due at the
// session's step, 0 when not (always on the other workers), -1 before
// start.
//
//export ps_save_due
func ps_save_due(hd C.int64_t) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	if h.s.SaveDue() {
		return 1
	}
	return 0
}

// ps_save_state saves the chief's due checkpoint with the n bytes of
// state, the program's own (copied); final != 0 keeps them instead for
// the checkpoint ps_done saves.
//
//export ps_save_state
func ps_save_state(hd C.int64_t, state *C.char, n C.int64_t, final C.int) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	if n < 0 || (n > 0 && state == nil) {
		return h.fail(errors.New("paramserv: save state: NULL state"))
	}
	b := []byte{}
	if n > 0 {
		b = slices.Clone(unsafe.Slice((*byte)(unsafe.Pointer(state)), int(n)))
	}
	if final != 0 {
		h.s.SetFinalState(b)
		return 0
	}
	if err := h.s.Save(callCtx(), b); err != nil {
		return h.fail(err)
	}
	return 0
}

// ps_resume_state reads the program's state saved with the checkpoint the
// ps restored (session.ResumeState): it stores a malloc'd copy in *out
// (free it with ps_free), its length in *n and the checkpoint's step in
// *step; *out is NULL (and *step -1 when no checkpoint was restored)
// when there is none.
//
//export ps_resume_state
func ps_resume_state(hd C.int64_t, out **C.char, n *C.int64_t, step *C.int64_t) C.int {
	h, rc := lock(hd, true)
	if h == nil {
		return rc
	}
	defer h.mu.Unlock()
	ctx, cancel := context.WithTimeout(callCtx(), 5*time.Minute)
	defer cancel()
	b, st, err := h.s.ResumeState(ctx)
	*out, *n, *step = nil, 0, C.int64_t(st)
	if err != nil {
		return h.fail(err)
	}
	if b != nil {
		p := C.malloc(C.size_t(max(1, len(b))))
		copy(unsafe.Slice((*byte)(p), len(b)), b)
		*out, *n = (*C.char)(p), C.int64_t(len(b))
	}
	return 0
}

// ps_free frees memory the library handed over (ps_resume_state's).
//
//export ps_free
func ps_free(p unsafe.Pointer) {
	C.free(p)
}
