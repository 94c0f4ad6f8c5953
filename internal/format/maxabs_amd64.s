//go:build amd64 && !purego

#include "textflag.h"

// func maxAbsAVX2(f []float32) (m uint32, done int)
TEXT ·maxAbsAVX2(SB), NOSPLIT, $0-40
	MOVQ f_base+0(FP), SI
	MOVQ f_len+8(FP), AX
	ANDQ $-16, AX              // values read: a multiple of 16
	MOVQ AX, BX
	SHRQ $4, BX
	MOVL $0x7fffffff, DX
	MOVQ DX, X2
	VPBROADCASTD X2, Y2        // the sign cleared in every lane
	VPXOR Y0, Y0, Y0           // the largest |x| bits of lanes 0-7
	VPXOR Y1, Y1, Y1           // of lanes 8-15
	TESTQ BX, BX
	JZ   done

loop:
	VPAND   (SI), Y2, Y3
	VPAND   32(SI), Y2, Y4
	VPMAXUD Y3, Y0, Y0
	VPMAXUD Y4, Y1, Y1
	ADDQ    $64, SI
	DECQ    BX
	JNZ     loop

done:
	VPMAXUD      Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXUD      X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPMAXUD      X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPMAXUD      X1, X0, X0
	VMOVD        X0, DX
	MOVL         DX, m+24(FP)
	MOVQ         AX, done+32(FP)
	VZEROUPPER
	RET
