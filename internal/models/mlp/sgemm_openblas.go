//go:build cgo && openblas

package mlp

/*
#cgo LDFLAGS: -l:libopenblas.so.0
// OpenBLAS's own prototypes (cblas.h), declared here so that only the
// shared library (Debian: libopenblas0-pthread) is needed to build, not
// its headers.
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };
void cblas_sgemm(const enum CBLAS_ORDER Order, const enum CBLAS_TRANSPOSE TransA, const enum CBLAS_TRANSPOSE TransB,
                 const int M, const int N, const int K, const float alpha, const float *A, const int lda,
                 const float *B, const int ldb, const float beta, float *C, const int ldc);
void openblas_set_num_threads(int num_threads);
*/
import "C"

import (
	"os"
	"unsafe"
)

// BLAS names the matrix multiply the model computes with.
const BLAS = "OpenBLAS (cgo)"

func init() {
	// A worker is one of several processes on a machine's cores (the ps,
	// other workers): one thread each unless OPENBLAS_NUM_THREADS says.
	if os.Getenv("OPENBLAS_NUM_THREADS") == "" {
		C.openblas_set_num_threads(1)
	}
}

// scratch is the pure-Go build's; OpenBLAS needs none, and runs on
// OPENBLAS_NUM_THREADS threads whatever Model.SetParallel says.
type scratch struct{ parallel bool }

// sgemm sets c (m×n, row stride ldc) to op(a)·op(b), where op transposes
// when tA, tB say; a is m×k (k×m if transposed) with row stride lda, b is
// k×n (n×k) with row stride ldb. All row-major float32, through OpenBLAS's
// cblas_sgemm.
func sgemm(_ *scratch, tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		for i := range m {
			clear(c[i*ldc : i*ldc+n])
		}
		return
	}
	ta, tb := C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans), C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans)
	if tA {
		ta = C.CblasTrans
	}
	if tB {
		tb = C.CblasTrans
	}
	// Bounds, as gonum would check them: cgo gets bare pointers.
	ar, ac, br, bc := m, k, k, n
	if tA {
		ar, ac = k, m
	}
	if tB {
		br, bc = n, k
	}
	if lda < ac || ldb < bc || ldc < n {
		panic("mlp: sgemm: a row stride is shorter than its row")
	}
	_, _, _ = a[(ar-1)*lda+ac-1], b[(br-1)*ldb+bc-1], c[(m-1)*ldc+n-1]
	C.cblas_sgemm(C.CblasRowMajor, ta, tb, C.int(m), C.int(n), C.int(k), 1,
		(*C.float)(unsafe.Pointer(&a[0])), C.int(lda), (*C.float)(unsafe.Pointer(&b[0])), C.int(ldb),
		0, (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}
