//go:build !(cgo && openblas) && amd64 && !purego

#include "textflag.h"

// The registers of both kernels: SI and R11 point at rows 0 and 4 of the
// current column of a (row i at i·R9 bytes from SI; R10 = 3·R9), R12 bytes
// to the next column; DI at the current row of the packed b (64 bytes a
// row); DX at c, R8 bytes a row; CX counts the columns of a left.
#define SETUP \
	MOVQ kc+0(FP), CX    \
	MOVQ a+8(FP), SI     \
	MOVQ rs+16(FP), R9   \
	MOVQ cs+24(FP), R12  \
	MOVQ b+32(FP), DI    \
	MOVQ c+40(FP), DX    \
	MOVQ ldc+48(FP), R8  \
	SHLQ $2, R9          \
	SHLQ $2, R12         \
	SHLQ $2, R8          \
	LEAQ (R9)(R9*2), R10 \
	LEAQ (SI)(R9*4), R11

// One step of the 6×16 kernel: row p of the packed b (16 values, Y0 and Y1)
// times each of the 6 values of column p of a, broadcast, added into the
// accumulators Y4..Y15 (row i's in Y(4+2i), Y(5+2i)).
#define STEP16 \
	VMOVUPS      (DI), Y0         \
	VMOVUPS      32(DI), Y1       \
	VBROADCASTSS (SI), Y2         \
	VBROADCASTSS (SI)(R9*1), Y3   \
	VFMADD231PS  Y0, Y2, Y4       \
	VFMADD231PS  Y1, Y2, Y5       \
	VFMADD231PS  Y0, Y3, Y6       \
	VFMADD231PS  Y1, Y3, Y7       \
	VBROADCASTSS (SI)(R9*2), Y2   \
	VBROADCASTSS (SI)(R10*1), Y3  \
	VFMADD231PS  Y0, Y2, Y8       \
	VFMADD231PS  Y1, Y2, Y9       \
	VFMADD231PS  Y0, Y3, Y10      \
	VFMADD231PS  Y1, Y3, Y11      \
	VBROADCASTSS (R11), Y2        \
	VBROADCASTSS (R11)(R9*1), Y3  \
	VFMADD231PS  Y0, Y2, Y12      \
	VFMADD231PS  Y1, Y2, Y13      \
	VFMADD231PS  Y0, Y3, Y14      \
	VFMADD231PS  Y1, Y3, Y15      \
	ADDQ         R12, SI          \
	ADDQ         R12, R11         \
	ADDQ         $64, DI

// The same for the 6×8 kernel: the first 8 values of b's row.
#define STEP8 \
	VMOVUPS      (DI), Y0         \
	VBROADCASTSS (SI), Y2         \
	VBROADCASTSS (SI)(R9*1), Y3   \
	VFMADD231PS  Y0, Y2, Y4       \
	VFMADD231PS  Y0, Y3, Y6       \
	VBROADCASTSS (SI)(R9*2), Y2   \
	VBROADCASTSS (SI)(R10*1), Y3  \
	VFMADD231PS  Y0, Y2, Y8       \
	VFMADD231PS  Y0, Y3, Y10      \
	VBROADCASTSS (R11), Y2        \
	VBROADCASTSS (R11)(R9*1), Y3  \
	VFMADD231PS  Y0, Y2, Y12      \
	VFMADD231PS  Y0, Y3, Y14      \
	ADDQ         R12, SI          \
	ADDQ         R12, R11         \
	ADDQ         $64, DI

// Row i of the tile: set to the accumulators, or add them to it.
#define STORE16(lo, hi) \
	VMOVUPS lo, (DX)   \
	VMOVUPS hi, 32(DX) \
	ADDQ    R8, DX

#define ADDSTORE16(lo, hi) \
	VADDPS  (DX), lo, lo   \
	VADDPS  32(DX), hi, hi \
	VMOVUPS lo, (DX)       \
	VMOVUPS hi, 32(DX)     \
	ADDQ    R8, DX

#define STORE8(lo) \
	VMOVUPS lo, (DX) \
	ADDQ    R8, DX

#define ADDSTORE8(lo) \
	VADDPS  (DX), lo, lo \
	VMOVUPS lo, (DX)     \
	ADDQ    R8, DX

// func kernelFMA(kc int, a *float32, rs, cs int, b, c *float32, ldc int, add bool)
TEXT ·kernelFMA(SB), NOSPLIT, $0-57
	SETUP
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
	SHRQ $1, BX          // steps of 2 columns
	JZ   tail16

loop16:
	STEP16
	STEP16
	DECQ BX
	JNZ  loop16

tail16:
	TESTQ $1, CX
	JZ    store16
	STEP16

store16:
	MOVBQZX add+56(FP), AX
	TESTQ   AX, AX
	JNZ     add16
	STORE16(Y4, Y5)
	STORE16(Y6, Y7)
	STORE16(Y8, Y9)
	STORE16(Y10, Y11)
	STORE16(Y12, Y13)
	STORE16(Y14, Y15)
	VZEROUPPER
	RET

add16:
	ADDSTORE16(Y4, Y5)
	ADDSTORE16(Y6, Y7)
	ADDSTORE16(Y8, Y9)
	ADDSTORE16(Y10, Y11)
	ADDSTORE16(Y12, Y13)
	ADDSTORE16(Y14, Y15)
	VZEROUPPER
	RET

// func kernelFMA8(kc int, a *float32, rs, cs int, b, c *float32, ldc int, add bool)
TEXT ·kernelFMA8(SB), NOSPLIT, $0-57
	SETUP
	VXORPS Y4, Y4, Y4
	VXORPS Y6, Y6, Y6
	VXORPS Y8, Y8, Y8
	VXORPS Y10, Y10, Y10
	VXORPS Y12, Y12, Y12
	VXORPS Y14, Y14, Y14

	MOVQ CX, BX
	SHRQ $1, BX
	JZ   tail8

loop8:
	STEP8
	STEP8
	DECQ BX
	JNZ  loop8

tail8:
	TESTQ $1, CX
	JZ    store8
	STEP8

store8:
	MOVBQZX add+56(FP), AX
	TESTQ   AX, AX
	JNZ     add8
	STORE8(Y4)
	STORE8(Y6)
	STORE8(Y8)
	STORE8(Y10)
	STORE8(Y12)
	STORE8(Y14)
	VZEROUPPER
	RET

add8:
	ADDSTORE8(Y4)
	ADDSTORE8(Y6)
	ADDSTORE8(Y8)
	ADDSTORE8(Y10)
	ADDSTORE8(Y12)
	ADDSTORE8(Y14)
	VZEROUPPER
	RET
