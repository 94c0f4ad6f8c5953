package optim

import (
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
)

// kernelConfigs are the rules and settings that have a vector kernel, and
// some that take the scalar loop beside one (centered RMSProp, FTRL with
// shrinkage).
var kernelConfigs = []Config{
	{Name: "adam", LearningRate: 1e-3},
	{Name: "adam", LearningRate: 0.5, Beta1: 0.5, Beta2: 0.75, Epsilon: 1},
	{Name: "adamw", LearningRate: 1e-3},
	{Name: "adamw", LearningRate: 0.3, Beta1: 0.8, Beta2: 0.9, Epsilon: 1e-3, WeightDecay: 0.1},
	{Name: "adagrad", LearningRate: 0.1},
	{Name: "adagrad", LearningRate: 0.1, Epsilon: 1e-7, InitialAccumulator: 1e-30},
	{Name: "momentum", LearningRate: 0.1},
	{Name: "momentum", LearningRate: 0.1, Momentum: 0.5, Nesterov: true},
	{Name: "rmsprop", LearningRate: 0.01},
	{Name: "rmsprop", LearningRate: 0.01, Momentum: 0.9, Rho: 0.5, Epsilon: 1e-3},
	{Name: "rmsprop", LearningRate: 0.01, Momentum: 0.9, Centered: true},
	{Name: "ftrl", LearningRate: 0.1},
	{Name: "ftrl", LearningRate: 0.05, L1: 1e-3, L2: 0.1, FTRLBeta: 0.5, InitialAccumulator: 1e-30},
	{Name: "ftrl", LearningRate: 0.05, L1: 1e-3, L2Shrinkage: 0.01},
	{Name: "sgd", LearningRate: 0.1},
	{Name: "proximal_sgd", LearningRate: 0.1},
	{Name: "proximal_sgd", LearningRate: 0.1, L1: 0.01, L2: 0.1},
	{Name: "proximal_sgd", LearningRate: 0.1, L1: 1e30, L2: 0.1},
	{Name: "proximal_adagrad", LearningRate: 0.1},
	{Name: "proximal_adagrad", LearningRate: 0.1, L1: 0.01, L2: 0.1, InitialAccumulator: 1e-30},
	{Name: "adadelta", LearningRate: 1},
	{Name: "adadelta", LearningRate: 0.1, Rho: 0.5, Epsilon: 1e-3},
}

// edgeValue draws a float32 that is usually ordinary and often not: zeros of
// both signs, subnormals, huge values, infinities and NaNs.
func edgeValue(rng *rand.Rand) float32 {
	switch rng.IntN(16) {
	case 0:
		return math.Float32frombits(rng.Uint32() & 0x807fffff) // subnormal or zero
	case 1:
		return float32(math.Copysign(0, rng.NormFloat64()))
	case 2:
		return math.Float32frombits(rng.Uint32()&0x80ffffff | 0x7e000000) // huge
	case 3:
		return float32(math.Inf(1 - 2*rng.IntN(2)))
	case 4:
		return float32(math.NaN())
	default:
		return float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(40)-20)))
	}
}

// TestKernelsMatchScalar: every rule with a vector kernel gives the scalar
// loop's bits, parameters and state, for every length (tails included),
// offset and kind of value, over a few steps so that state carries over.
// A NaN matches any NaN: which of two NaN operands an addition passes on
// depends on the order the compiler put them in, and Go leaves it open.
func TestKernelsMatchScalar(t *testing.T) {
	if !useAVX2 {
		t.Skip("no vector kernels on this CPU or build")
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for _, cfg := range kernelConfigs {
		r := mustNew(t, cfg)
		for n := range 40 {
			for off := range 3 {
				size := n + off
				param, grad := make([]float32, size), make([]float32, size)
				state := newState(r, size)
				for i := range param {
					param[i] = edgeValue(rng)
					for _, s := range state {
						if rng.IntN(2) == 0 {
							s[i] = edgeValue(rng)
							if cfg.Name != "adam" && cfg.Name != "adamw" && cfg.Name != "momentum" {
								s[i] = float32(math.Abs(float64(s[i]))) // accumulators of squares
							}
						}
					}
				}
				wantP := append([]float32(nil), param...)
				wantS := make([][]float32, len(state))
				for i, s := range state {
					wantS[i] = append([]float32(nil), s...)
				}
				for step := int64(1); step <= 3; step++ {
					for i := range grad {
						grad[i] = edgeValue(rng)
					}
					r.Update(param[off:], grad[off:], sub(state, off), step)
					useAVX2 = false
					r.Update(wantP[off:], grad[off:], sub(wantS, off), step)
					useAVX2 = true
					same(t, cfg, n, off, step, "param", param, wantP)
					for i := range state {
						same(t, cfg, n, off, step, "state", state[i], wantS[i])
					}
				}
			}
		}
	}
}

func sub(state [][]float32, off int) [][]float32 {
	s := make([][]float32, len(state))
	for i := range state {
		s[i] = state[i][off:]
	}
	return s
}

func same(t *testing.T, cfg Config, n, off int, step int64, what string, got, want []float32) {
	t.Helper()
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("%+v, n %d, offset %d, step %d, %s[%d]: kernel %v (%08x), scalar %v (%08x)",
				cfg, n, off, step, what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestKernelsOffByGODEBUG runs the rules' tests again in a process started
// with GODEBUG=cpu.avx2=off, as on a CPU without AVX2: the kernels must be
// off there, and the scalar loops must pass the hand-computed and formula
// checks on their own.
func TestKernelsOffByGODEBUG(t *testing.T) {
	if os.Getenv("OPTIM_WANT_NO_AVX2") == "1" {
		if useAVX2 {
			t.Fatal("GODEBUG=cpu.avx2=off left the AVX2 kernels on")
		}
		return
	}
	if !useAVX2 {
		t.Skip("no vector kernels on this CPU or build: the other tests already run the scalar loops")
	}
	godebug := "cpu.avx2=off"
	if v := os.Getenv("GODEBUG"); v != "" {
		godebug = v + "," + godebug
	}
	cmd := exec.Command(os.Args[0], "-test.count=1",
		"-test.run=^(TestKernelsOffByGODEBUG|TestHandComputed|TestRulesAgainstFormulas|TestSGDKernelMatchesScalar)$")
	cmd.Env = append(os.Environ(), "GODEBUG="+godebug, "OPTIM_WANT_NO_AVX2=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the rules' tests under GODEBUG=%s: %v\n%s", godebug, err, out)
	}
}
