//go:build amd64 && !purego

#include "textflag.h"

// func sgdAVX2(param, grad []float32, lr float64) int
TEXT ·sgdAVX2(SB), NOSPLIT, $0-64
	MOVQ param_base+0(FP), DI
	MOVQ param_len+8(FP), CX
	MOVQ grad_base+24(FP), SI
	VBROADCASTSD lr+48(FP), Y2
	MOVQ CX, AX
	ANDQ $-8, AX          // values done: a multiple of 8
	MOVQ AX, BX
	SHRQ $3, BX           // iterations of 8 values
	JZ   done

loop:
	VCVTPS2PD (DI), Y0
	VCVTPS2PD 16(DI), Y1
	VCVTPS2PD (SI), Y3
	VCVTPS2PD 16(SI), Y4
	VMULPD    Y2, Y3, Y3
	VMULPD    Y2, Y4, Y4
	VSUBPD    Y3, Y0, Y0
	VSUBPD    Y4, Y1, Y1
	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VMOVUPS   X0, (DI)
	VMOVUPS   X1, 16(DI)
	ADDQ      $32, DI
	ADDQ      $32, SI
	DECQ      BX
	JNZ       loop
	VZEROUPPER

done:
	MOVQ AX, ret+56(FP)
	RET
