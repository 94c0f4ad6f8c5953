//go:build amd64 && !purego

#include "textflag.h"

// func finiteAVX2(f []float32) (bad bool, done int)
TEXT ·finiteAVX2(SB), NOSPLIT, $0-40
	MOVQ f_base+0(FP), SI
	MOVQ f_len+8(FP), AX
	ANDQ $-16, AX              // values checked: a multiple of 16
	MOVQ AX, BX
	SHRQ $4, BX
	MOVL $0x7f800000, DX
	MOVQ DX, X1
	VPBROADCASTD X1, Y1        // the exponent mask in every lane
	VPXOR Y5, Y5, Y5           // lanes whose exponent was all ones
	TESTQ BX, BX
	JZ   done

loop:
	VPAND    (SI), Y1, Y0
	VPAND    32(SI), Y1, Y3
	VPCMPEQD Y1, Y0, Y0
	VPCMPEQD Y1, Y3, Y3
	VPOR     Y0, Y5, Y5
	VPOR     Y3, Y5, Y5
	ADDQ     $64, SI
	DECQ     BX
	JNZ      loop

done:
	VPTEST Y5, Y5
	SETNE  bad+24(FP)
	MOVQ   AX, done+32(FP)
	VZEROUPPER
	RET
