//go:build amd64 && !purego

#include "textflag.h"

// The vector kernels of kernels_amd64.go. Each loop does 4 values: the
// float32 inputs widened into the float64 lanes of a YMM register, the
// rule's scalar operations in its order, the stored values rounded back.
// Go's operand order: VSUBPD b, a, d is d = a - b; VDIVPD b, a, d is d = a/b.

// func adamAVX2(n int, param, grad, m, v *float32, k *[6]float64) int
// k: b1, 1-b1, b2, 1-b2, eps, lr_t.
TEXT ·adamAVX2(SB), NOSPLIT, $0-56
	MOVQ n+0(FP), CX
	MOVQ param+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ m+24(FP), R8
	MOVQ v+32(FP), R9
	MOVQ k+40(FP), AX
	VBROADCASTSD 0(AX), Y10
	VBROADCASTSD 8(AX), Y11
	VBROADCASTSD 16(AX), Y12
	VBROADCASTSD 24(AX), Y13
	VBROADCASTSD 32(AX), Y14
	VBROADCASTSD 40(AX), Y15
	ANDQ $-4, CX
	MOVQ CX, ret+48(FP)
	SHRQ $2, CX
	JZ   adamdone

adamloop:
	VCVTPS2PD (SI), Y0       // g
	VCVTPS2PD (R8), Y1       // m
	VCVTPS2PD (R9), Y2       // v
	VMULPD    Y10, Y1, Y1    // b1*m
	VMULPD    Y11, Y0, Y3    // (1-b1)*g
	VADDPD    Y3, Y1, Y1     // mi = b1*m + (1-b1)*g
	VMULPD    Y12, Y2, Y2    // b2*v
	VMULPD    Y13, Y0, Y4    // (1-b2)*g
	VMULPD    Y0, Y4, Y4     // (1-b2)*g*g
	VADDPD    Y4, Y2, Y2     // vi
	VCVTPD2PSY Y1, X5
	VMOVUPS   X5, (R8)
	VCVTPD2PSY Y2, X6
	VMOVUPS   X6, (R9)
	VSQRTPD   Y2, Y2
	VADDPD    Y14, Y2, Y2    // sqrt(vi) + eps
	VMULPD    Y15, Y1, Y1    // lr_t*mi
	VDIVPD    Y2, Y1, Y1     // lr_t*mi / (sqrt(vi)+eps)
	VCVTPS2PD (DI), Y7       // p
	VSUBPD    Y1, Y7, Y7
	VCVTPD2PSY Y7, X7
	VMOVUPS   X7, (DI)
	ADDQ      $16, DI
	ADDQ      $16, SI
	ADDQ      $16, R8
	ADDQ      $16, R9
	DECQ      CX
	JNZ       adamloop
	VZEROUPPER

adamdone:
	RET

// func adamWAVX2(n int, param, grad, m, v *float32, k *[8]float64) int
// k: b1, 1-b1, b2, 1-b2, eps, step size, decay, 1/sqrt(bias correction 2).
TEXT ·adamWAVX2(SB), NOSPLIT, $0-56
	MOVQ n+0(FP), CX
	MOVQ param+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ m+24(FP), R8
	MOVQ v+32(FP), R9
	MOVQ k+40(FP), AX
	VBROADCASTSD 0(AX), Y8
	VBROADCASTSD 8(AX), Y9
	VBROADCASTSD 16(AX), Y10
	VBROADCASTSD 24(AX), Y11
	VBROADCASTSD 32(AX), Y12
	VBROADCASTSD 40(AX), Y13
	VBROADCASTSD 48(AX), Y14
	VBROADCASTSD 56(AX), Y15
	ANDQ $-4, CX
	MOVQ CX, ret+48(FP)
	SHRQ $2, CX
	JZ   adamwdone

adamwloop:
	VCVTPS2PD (SI), Y0       // g
	VCVTPS2PD (R8), Y1       // m
	VCVTPS2PD (R9), Y2       // v
	VMULPD    Y8, Y1, Y1     // b1*m
	VMULPD    Y9, Y0, Y3     // (1-b1)*g
	VADDPD    Y3, Y1, Y1     // mi
	VMULPD    Y10, Y2, Y2    // b2*v
	VMULPD    Y11, Y0, Y4    // (1-b2)*g
	VMULPD    Y0, Y4, Y4     // (1-b2)*g*g
	VADDPD    Y4, Y2, Y2     // vi
	VCVTPD2PSY Y1, X5
	VMOVUPS   X5, (R8)
	VCVTPD2PSY Y2, X6
	VMOVUPS   X6, (R9)
	VSQRTPD   Y2, Y2
	VMULPD    Y15, Y2, Y2    // sqrt(vi)*invSqrtBC2
	VADDPD    Y12, Y2, Y2    // + eps
	VMULPD    Y13, Y1, Y1    // stepSize*mi
	VDIVPD    Y2, Y1, Y1     // / (...)
	VCVTPS2PD (DI), Y7       // p
	VMULPD    Y14, Y7, Y7    // p*decay
	VSUBPD    Y1, Y7, Y7
	VCVTPD2PSY Y7, X7
	VMOVUPS   X7, (DI)
	ADDQ      $16, DI
	ADDQ      $16, SI
	ADDQ      $16, R8
	ADDQ      $16, R9
	DECQ      CX
	JNZ       adamwloop
	VZEROUPPER

adamwdone:
	RET

// func adagradAVX2(n int, param, grad, acc *float32, k *[2]float64) int
// k: lr, eps.
TEXT ·adagradAVX2(SB), NOSPLIT, $0-48
	MOVQ n+0(FP), CX
	MOVQ param+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ acc+24(FP), R8
	MOVQ k+32(FP), AX
	VBROADCASTSD 0(AX), Y14
	VBROADCASTSD 8(AX), Y15
	ANDQ $-4, CX
	MOVQ CX, ret+40(FP)
	SHRQ $2, CX
	JZ   adagraddone

adagradloop:
	VCVTPS2PD (SI), Y0       // g
	VCVTPS2PD (R8), Y1       // acc
	VMULPD    Y0, Y0, Y2     // g*g
	VADDPD    Y2, Y1, Y1     // a = acc + g*g
	VCVTPD2PSY Y1, X3
	VMOVUPS   X3, (R8)
	VSQRTPD   Y1, Y1
	VADDPD    Y15, Y1, Y1    // sqrt(a) + eps
	VMULPD    Y14, Y0, Y0    // lr*g
	VDIVPD    Y1, Y0, Y0
	VCVTPS2PD (DI), Y4
	VSUBPD    Y0, Y4, Y4
	VCVTPD2PSY Y4, X4
	VMOVUPS   X4, (DI)
	ADDQ      $16, DI
	ADDQ      $16, SI
	ADDQ      $16, R8
	DECQ      CX
	JNZ       adagradloop
	VZEROUPPER

adagraddone:
	RET

// func momentumAVX2(n int, param, grad, acc *float32, k *[3]float64) int
// k: lr, mu, lr*mu.
TEXT ·momentumAVX2(SB), NOSPLIT, $0-48
	MOVQ n+0(FP), CX
	MOVQ param+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ acc+24(FP), R8
	MOVQ k+32(FP), AX
	VBROADCASTSD 0(AX), Y14
	VBROADCASTSD 8(AX), Y15
	ANDQ $-4, CX
	MOVQ CX, ret+40(FP)
	SHRQ $3, CX
	JZ   momentumtail

momentumloop:
	VCVTPS2PD (SI), Y0       // g
	VCVTPS2PD 16(SI), Y4
	VCVTPS2PD (R8), Y1       // acc
	VCVTPS2PD 16(R8), Y5
	VMULPD    Y15, Y1, Y1    // mu*acc
	VMULPD    Y15, Y5, Y5
	VADDPD    Y0, Y1, Y1     // a = mu*acc + g
	VADDPD    Y4, Y5, Y5
	VCVTPD2PSY Y1, X2
	VMOVUPS   X2, (R8)
	VCVTPD2PSY Y5, X6
	VMOVUPS   X6, 16(R8)
	VMULPD    Y14, Y1, Y1    // lr*a
	VMULPD    Y14, Y5, Y5
	VCVTPS2PD (DI), Y3
	VCVTPS2PD 16(DI), Y7
	VSUBPD    Y1, Y3, Y3
	VSUBPD    Y5, Y7, Y7
	VCVTPD2PSY Y3, X3
	VMOVUPS   X3, (DI)
	VCVTPD2PSY Y7, X7
	VMOVUPS   X7, 16(DI)
	ADDQ      $32, DI
	ADDQ      $32, SI
	ADDQ      $32, R8
	DECQ      CX
	JNZ       momentumloop

momentumtail:
	MOVQ ret+40(FP), CX
	ANDQ $4, CX
	JZ   momentumdone
	VCVTPS2PD (SI), Y0
	VCVTPS2PD (R8), Y1
	VMULPD    Y15, Y1, Y1
	VADDPD    Y0, Y1, Y1
	VCVTPD2PSY Y1, X2
	VMOVUPS   X2, (R8)
	VMULPD    Y14, Y1, Y1
	VCVTPS2PD (DI), Y3
	VSUBPD    Y1, Y3, Y3
	VCVTPD2PSY Y3, X3
	VMOVUPS   X3, (DI)

momentumdone:
	VZEROUPPER
	RET

// func nesterovAVX2(n int, param, grad, acc *float32, k *[3]float64) int
// k: lr, mu, lr*mu.
TEXT ·nesterovAVX2(SB), NOSPLIT, $0-48
	MOVQ n+0(FP), CX
	MOVQ param+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ acc+24(FP), R8
	MOVQ k+32(FP), AX
	VBROADCASTSD 0(AX), Y13
	VBROADCASTSD 8(AX), Y14
	VBROADCASTSD 16(AX), Y15
	ANDQ $-4, CX
	MOVQ CX, ret+40(FP)
	SHRQ $2, CX
	JZ   nesterovdone

nesterovloop:
	VCVTPS2PD (SI), Y0       // g
	VCVTPS2PD (R8), Y1       // acc
	VMULPD    Y14, Y1, Y1    // mu*acc
	VADDPD    Y0, Y1, Y1     // a = mu*acc + g
	VCVTPD2PSY Y1, X2
	VMOVUPS   X2, (R8)
	VMULPD    Y13, Y0, Y0    // lr*g
	VMULPD    Y15, Y1, Y1    // lrmu*a
	VADDPD    Y1, Y0, Y0     // lr*g + lrmu*a
	VCVTPS2PD (DI), Y3
	VSUBPD    Y0, Y3, Y3
	VCVTPD2PSY Y3, X3
	VMOVUPS   X3, (DI)
	ADDQ      $16, DI
	ADDQ      $16, SI
	ADDQ      $16, R8
	DECQ      CX
	JNZ       nesterovloop
	VZEROUPPER

nesterovdone:
	RET

// func rmspropAVX2(n int, param, grad, ms, mom *float32, k *[5]float64) int
// k: rho, 1-rho, mu, lr, eps.
TEXT ·rmspropAVX2(SB), NOSPLIT, $0-56
	MOVQ n+0(FP), CX
	MOVQ param+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ ms+24(FP), R8
	MOVQ mom+32(FP), R9
	MOVQ k+40(FP), AX
	VBROADCASTSD 0(AX), Y11
	VBROADCASTSD 8(AX), Y12
	VBROADCASTSD 16(AX), Y13
	VBROADCASTSD 24(AX), Y14
	VBROADCASTSD 32(AX), Y15
	ANDQ $-4, CX
	MOVQ CX, ret+48(FP)
	SHRQ $2, CX
	JZ   rmspropdone

rmsproploop:
	VCVTPS2PD (SI), Y0       // g
	VCVTPS2PD (R8), Y1       // ms
	VCVTPS2PD (R9), Y2       // mom
	VMULPD    Y11, Y1, Y1    // rho*ms
	VMULPD    Y12, Y0, Y3    // (1-rho)*g
	VMULPD    Y0, Y3, Y3     // (1-rho)*g*g
	VADDPD    Y3, Y1, Y1     // s
	VCVTPD2PSY Y1, X4
	VMOVUPS   X4, (R8)
	VADDPD    Y15, Y1, Y1    // s + eps
	VSQRTPD   Y1, Y1
	VMULPD    Y14, Y0, Y0    // lr*g
	VDIVPD    Y1, Y0, Y0     // lr*g / sqrt(s+eps)
	VMULPD    Y13, Y2, Y2    // mu*mom
	VADDPD    Y0, Y2, Y2     // m
	VCVTPD2PSY Y2, X5
	VMOVUPS   X5, (R9)
	VCVTPS2PD (DI), Y6
	VSUBPD    Y2, Y6, Y6
	VCVTPD2PSY Y6, X6
	VMOVUPS   X6, (DI)
	ADDQ      $16, DI
	ADDQ      $16, SI
	ADDQ      $16, R8
	ADDQ      $16, R9
	DECQ      CX
	JNZ       rmsproploop
	VZEROUPPER

rmspropdone:
	RET

// func ftrlAVX2(n int, param, grad, nacc, z *float32, k *[5]float64) int
// k: 1/alpha, l1, beta, 2*l2, |l1|. Without l2 shrinkage only.
TEXT ·ftrlAVX2(SB), NOSPLIT, $0-56
	MOVQ n+0(FP), CX
	MOVQ param+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ nacc+24(FP), R8
	MOVQ z+32(FP), R9
	MOVQ k+40(FP), AX
	VBROADCASTSD 0(AX), Y10
	VBROADCASTSD 8(AX), Y11
	VBROADCASTSD 16(AX), Y12
	VBROADCASTSD 24(AX), Y13
	VBROADCASTSD 32(AX), Y14
	VPCMPEQQ  Y15, Y15, Y15
	VPSLLQ    $63, Y15, Y15  // sign bits
	ANDQ $-4, CX
	MOVQ CX, ret+48(FP)
	SHRQ $2, CX
	JZ   ftrldone

ftrlloop:
	VCVTPS2PD (SI), Y0       // g
	VCVTPS2PD (R8), Y1       // n0
	VCVTPS2PD (DI), Y2       // p
	VCVTPS2PD (R9), Y3       // z
	VMULPD    Y0, Y0, Y4     // g*g
	VADDPD    Y4, Y1, Y4     // n1 = n0 + g*g
	VSQRTPD   Y4, Y5         // s1
	VSQRTPD   Y1, Y1         // sqrt(n0)
	VSUBPD    Y1, Y5, Y1     // s1 - sqrt(n0)
	VMULPD    Y10, Y1, Y1    // sigma
	VADDPD    Y0, Y3, Y3     // z + g
	VMULPD    Y2, Y1, Y1     // sigma*p
	VSUBPD    Y1, Y3, Y3     // zi
	VCVTPD2PSY Y4, X4
	VMOVUPS   X4, (R8)
	VCVTPD2PSY Y3, X6
	VMOVUPS   X6, (R9)
	VANDNPD   Y3, Y15, Y6    // |zi|
	VCMPPD    $2, Y11, Y6, Y6 // |zi| <= l1
	VANDPD    Y15, Y3, Y7    // sign of zi
	VORPD     Y14, Y7, Y7    // copysign(l1, zi)
	VSUBPD    Y7, Y3, Y3     // zi - copysign(l1, zi)
	VXORPD    Y15, Y3, Y3    // negated
	VADDPD    Y12, Y5, Y5    // beta + s1
	VMULPD    Y10, Y5, Y5    // * 1/alpha
	VADDPD    Y13, Y5, Y5    // + 2*l2
	VDIVPD    Y5, Y3, Y3
	VANDNPD   Y3, Y6, Y3     // +0 where |zi| <= l1
	VCVTPD2PSY Y3, X3
	VMOVUPS   X3, (DI)
	ADDQ      $16, DI
	ADDQ      $16, SI
	ADDQ      $16, R8
	ADDQ      $16, R9
	DECQ      CX
	JNZ       ftrlloop
	VZEROUPPER

ftrldone:
	RET

// shrink: Y0 = copysign(max(|Y0| - Y1, 0), Y0), with Y15 the sign bits and
// Y14 zero (prox's l1 step). VMAXPD passes its second source on a NaN, as
// Go's max passes the NaN. Uses Y2, Y3.
#define SHRINK \
	VANDNPD   Y0, Y15, Y2; \
	VSUBPD    Y1, Y2, Y2; \
	VMAXPD    Y2, Y14, Y2; \
	VANDPD    Y15, Y0, Y3; \
	VANDNPD   Y2, Y15, Y2; \
	VORPD     Y3, Y2, Y0

// func proximalSGDAVX2(n int, param, grad *float32, k *[4]float64) int
// k: lr, lr*l1, 1 + lr*l2, l1 > 0 (1 or 0).
TEXT ·proximalSGDAVX2(SB), NOSPLIT, $0-40
	MOVQ n+0(FP), CX
	MOVQ param+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ k+24(FP), AX
	VBROADCASTSD 0(AX), Y11
	VBROADCASTSD 8(AX), Y12
	VBROADCASTSD 16(AX), Y13
	MOVQ 24(AX), DX
	VXORPD    Y14, Y14, Y14
	VPCMPEQQ  Y15, Y15, Y15
	VPSLLQ    $63, Y15, Y15
	ANDQ $-4, CX
	MOVQ CX, ret+32(FP)
	SHRQ $2, CX
	JZ   proxsgddone

proxsgdloop:
	VCVTPS2PD (SI), Y4       // g
	VCVTPS2PD (DI), Y0       // p
	VMULPD    Y11, Y4, Y4    // lr*g
	VSUBPD    Y4, Y0, Y0     // v = p - lr*g
	TESTQ     DX, DX
	JZ        proxsgdnol1
	VMOVAPD   Y12, Y1
	SHRINK

proxsgdnol1:
	VDIVPD    Y13, Y0, Y0    // v / (1 + lr*l2)
	VCVTPD2PSY Y0, X0
	VMOVUPS   X0, (DI)
	ADDQ      $16, DI
	ADDQ      $16, SI
	DECQ      CX
	JNZ       proxsgdloop
	VZEROUPPER

proxsgddone:
	RET

// func proximalAdagradAVX2(n int, param, grad, acc *float32, k *[4]float64) int
// k: lr, l1, l2, l1 > 0 (1 or 0).
TEXT ·proximalAdagradAVX2(SB), NOSPLIT, $0-48
	MOVQ n+0(FP), CX
	MOVQ param+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ acc+24(FP), R8
	MOVQ k+32(FP), AX
	VBROADCASTSD 0(AX), Y11
	VBROADCASTSD 8(AX), Y12
	VBROADCASTSD 16(AX), Y13
	MOVQ 24(AX), DX
	VXORPD    Y14, Y14, Y14
	VPCMPEQQ  Y15, Y15, Y15
	VPSLLQ    $63, Y15, Y15
	VPCMPEQQ  Y10, Y10, Y10
	VPSRLQ    $54, Y10, Y10
	VPSLLQ    $52, Y10, Y10  // 1.0: exponent bits 0x3ff
	ANDQ $-4, CX
	MOVQ CX, ret+40(FP)
	SHRQ $2, CX
	JZ   proxadadone

proxadaloop:
	VCVTPS2PD (SI), Y4       // g
	VCVTPS2PD (R8), Y5       // acc
	VMULPD    Y4, Y4, Y6     // g*g
	VADDPD    Y6, Y5, Y5     // a = acc + g*g
	VCVTPD2PSY Y5, X6
	VMOVUPS   X6, (R8)
	VSQRTPD   Y5, Y5
	VDIVPD    Y5, Y11, Y5    // lrt = lr / sqrt(a)
	VCVTPS2PD (DI), Y0       // p
	VMULPD    Y5, Y4, Y4     // lrt*g
	VSUBPD    Y4, Y0, Y0     // v = p - lrt*g
	TESTQ     DX, DX
	JZ        proxadanol1
	VMULPD    Y12, Y5, Y1    // lrt*l1
	SHRINK

proxadanol1:
	VMULPD    Y13, Y5, Y5    // lrt*l2
	VADDPD    Y5, Y10, Y5    // 1 + lrt*l2
	VDIVPD    Y5, Y0, Y0
	VCVTPD2PSY Y0, X0
	VMOVUPS   X0, (DI)
	ADDQ      $16, DI
	ADDQ      $16, SI
	ADDQ      $16, R8
	DECQ      CX
	JNZ       proxadaloop
	VZEROUPPER

proxadadone:
	RET

// func adadeltaAVX2(n int, param, grad, acc, upd *float32, k *[4]float64) int
// k: rho, 1-rho, eps, lr.
TEXT ·adadeltaAVX2(SB), NOSPLIT, $0-56
	MOVQ n+0(FP), CX
	MOVQ param+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ acc+24(FP), R8
	MOVQ upd+32(FP), R9
	MOVQ k+40(FP), AX
	VBROADCASTSD 0(AX), Y12
	VBROADCASTSD 8(AX), Y13
	VBROADCASTSD 16(AX), Y14
	VBROADCASTSD 24(AX), Y15
	ANDQ $-4, CX
	MOVQ CX, ret+48(FP)
	SHRQ $2, CX
	JZ   adadeltadone

adadeltaloop:
	VCVTPS2PD (SI), Y0       // g
	VCVTPS2PD (R8), Y1       // acc
	VCVTPS2PD (R9), Y2       // upd
	VMULPD    Y12, Y1, Y1    // rho*acc
	VMULPD    Y13, Y0, Y3    // (1-rho)*g
	VMULPD    Y0, Y3, Y3     // (1-rho)*g*g
	VADDPD    Y3, Y1, Y1     // a
	VCVTPD2PSY Y1, X3
	VMOVUPS   X3, (R8)
	VADDPD    Y14, Y2, Y4    // upd + eps
	VSQRTPD   Y4, Y4
	VADDPD    Y14, Y1, Y1    // a + eps
	VSQRTPD   Y1, Y1
	VDIVPD    Y1, Y4, Y4     // sqrt(upd+eps) / sqrt(a+eps)
	VMULPD    Y0, Y4, Y4     // u = ... * g
	VMULPD    Y12, Y2, Y2    // rho*upd
	VMULPD    Y13, Y4, Y5    // (1-rho)*u
	VMULPD    Y4, Y5, Y5     // (1-rho)*u*u
	VADDPD    Y5, Y2, Y2
	VCVTPD2PSY Y2, X2
	VMOVUPS   X2, (R9)
	VMULPD    Y15, Y4, Y4    // lr*u
	VCVTPS2PD (DI), Y6
	VSUBPD    Y4, Y6, Y6
	VCVTPD2PSY Y6, X6
	VMOVUPS   X6, (DI)
	ADDQ      $16, DI
	ADDQ      $16, SI
	ADDQ      $16, R8
	ADDQ      $16, R9
	DECQ      CX
	JNZ       adadeltaloop
	VZEROUPPER

adadeltadone:
	RET
