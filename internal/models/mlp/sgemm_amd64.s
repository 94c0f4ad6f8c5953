//go:build !(cgo && openblas) && amd64 && !purego

#include "textflag.h"

// One step of the sliver: row p of the packed b (16 values, Y0 and Y1)
// times each of the 6 values of row p of the packed a, broadcast, added
// into the accumulators Y4..Y15 (row i's in Y(4+2i), Y(5+2i)).
#define STEP(ao, bo) \
	VMOVUPS      bo(DI), Y0      \
	VMOVUPS      bo+32(DI), Y1   \
	VBROADCASTSS ao(SI), Y2      \
	VBROADCASTSS ao+4(SI), Y3    \
	VFMADD231PS  Y0, Y2, Y4      \
	VFMADD231PS  Y1, Y2, Y5      \
	VFMADD231PS  Y0, Y3, Y6      \
	VFMADD231PS  Y1, Y3, Y7      \
	VBROADCASTSS ao+8(SI), Y2    \
	VBROADCASTSS ao+12(SI), Y3   \
	VFMADD231PS  Y0, Y2, Y8      \
	VFMADD231PS  Y1, Y2, Y9      \
	VFMADD231PS  Y0, Y3, Y10     \
	VFMADD231PS  Y1, Y3, Y11     \
	VBROADCASTSS ao+16(SI), Y2   \
	VBROADCASTSS ao+20(SI), Y3   \
	VFMADD231PS  Y0, Y2, Y12     \
	VFMADD231PS  Y1, Y2, Y13     \
	VFMADD231PS  Y0, Y3, Y14     \
	VFMADD231PS  Y1, Y3, Y15

// Row i of the tile: set to the accumulators, or add them to it.
#define STORE(lo, hi) \
	VMOVUPS lo, (DX)   \
	VMOVUPS hi, 32(DX) \
	ADDQ    R8, DX

#define ADDSTORE(lo, hi) \
	VADDPS  (DX), lo, lo   \
	VADDPS  32(DX), hi, hi \
	VMOVUPS lo, (DX)       \
	VMOVUPS hi, 32(DX)     \
	ADDQ    R8, DX

// func kernelFMA(kc int, a, b, c *float32, ldc int, add bool)
TEXT ·kernelFMA(SB), NOSPLIT, $0-41
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8          // bytes a row of c

	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15

	MOVQ CX, BX
	SHRQ $2, BX          // steps of 4 rows
	JZ   tail

loop4:
	STEP(0, 0)
	STEP(24, 64)
	STEP(48, 128)
	STEP(72, 192)
	ADDQ $96, SI
	ADDQ $256, DI
	DECQ BX
	JNZ  loop4

tail:
	ANDQ $3, CX
	JZ   store

loop1:
	STEP(0, 0)
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop1

store:
	MOVBQZX add+40(FP), AX
	TESTQ   AX, AX
	JNZ     add

	STORE(Y4, Y5)
	STORE(Y6, Y7)
	STORE(Y8, Y9)
	STORE(Y10, Y11)
	STORE(Y12, Y13)
	STORE(Y14, Y15)
	VZEROUPPER
	RET

add:
	ADDSTORE(Y4, Y5)
	ADDSTORE(Y6, Y7)
	ADDSTORE(Y8, Y9)
	ADDSTORE(Y10, Y11)
	ADDSTORE(Y12, Y13)
	ADDSTORE(Y14, Y15)
	VZEROUPPER
	RET
