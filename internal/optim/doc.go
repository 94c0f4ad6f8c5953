// Package optim holds the update rules the parameter servers apply, each a
// pure function over float32 slices, and the learning-rate schedules that
// set their rate from the global step. The rules are every optimizer of
// TensorFlow 1's tf.train (GradientDescent, Momentum, Adagrad, AdagradDA,
// Adadelta, Adam, RMSProp, FTRL, ProximalGradientDescent, ProximalAdagrad)
// plus AdamW and LAMB. This page details the first five; rules_tf.go and
// rules_decoupled.go give the others' formulas, and docs/OPTIMIZERS.md all of
// them with their defaults and the schedules' syntax (Schedule). A rule keeps no state of its own: the caller owns the state slices
// (one per StateSlots) and passes them in, so the same rule serves a dense
// variable (one long slice) and a sparse table (one short slice per row, the
// state held in flat arrays).
//
// Rules are safe for concurrent use on disjoint slices; nothing here locks. A
// Rule is immutable once New returns it. ApplyParallel splits one long slice
// into pieces that a caller's parallel.Runner spreads over the cores, and
// returns when they are all done; the package starts no goroutine.
//
// # Using a rule
//
// Build a rule with New, allocate StateSlots() zeroed slices as long as the
// parameter slice, let InitState fill them, then call Update once per
// gradient with a step that counts from 1:
//
//	r, err := optim.New(optim.Config{Name: "adam", LearningRate: 1e-3})
//	state := make([][]float32, r.StateSlots())
//	for i := range state {
//		state[i] = make([]float32, len(param))
//	}
//	r.InitState(state)
//	r.Update(param, grad, state, step)
//
// The state is plain data: a checkpoint saves it beside the parameters, and a
// sparse table may allocate it row by row, as long as each row's state goes
// through InitState once before its first Update. InitState writes every
// slot in full, so it also resets a row whose memory is being reused. The
// order of the slots is fixed per rule (below) and is what a checkpoint
// stores.
//
// # The rules
//
// The rules follow TensorFlow 1.x (tf.train.*Optimizer and the Apply* kernels
// behind them), so a job moved from TensorFlow's parameter servers trains the
// same way. Per coordinate, with learning rate lr, gradient g and parameter p:
//
// "sgd" (GradientDescentOptimizer, ApplyGradientDescent), no state:
//
//	p -= lr*g
//
// "momentum" (MomentumOptimizer, ApplyMomentum), state [accum], momentum mu
// (default 0.9):
//
//	accum = mu*accum + g
//	p -= lr*accum                  // Nesterov false
//	p -= lr*g + lr*mu*accum        // Nesterov true (use_nesterov)
//
// "adagrad" (TF1 AdagradOptimizer, ApplyAdagrad), state [accum] starting at
// InitialAccumulator (default 0.1), epsilon eps (default 0):
//
//	accum += g*g
//	p -= lr*g / (sqrt(accum) + eps)
//
// With the default eps = 0 this is TF1's p -= lr*g/sqrt(accum) exactly. A
// positive Epsilon gives TF2's ApplyAdagradV2 (Keras uses 1e-7). The initial
// accumulator keeps the first step finite without it.
//
// "adam" (TF1 AdamOptimizer, ApplyAdam), state [m, v], beta1 b1 (0.9), beta2
// b2 (0.999), epsilon eps (1e-8), t = step:
//
//	m = b1*m + (1-b1)*g
//	v = b2*v + (1-b2)*g*g
//	lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t)
//	p -= lr_t * m / (sqrt(v) + eps)
//
// eps is TF1's "epsilon hat": it is added after the bias correction that lr_t
// folds in, not to sqrt of the corrected v as in the paper's Algorithm 1. A
// step below 1 counts as 1.
//
// "ftrl" (FTRL-Proximal, McMahan et al. 2013, "Ad Click Prediction: a View
// from the Trenches", Algorithm 1; TF FtrlOptimizer with learning_rate_power
// -0.5), state [n, z]: n is TF's "accum" and starts at InitialAccumulator
// (default 0.1, as TF), z is TF's "linear" and starts at 0. alpha is
// LearningRate, beta is FTRLBeta (default 1), l1 and l2 are L1 and L2
// (default 0):
//
//	sigma = (sqrt(n + g*g) - sqrt(n)) / alpha
//	z += g - sigma*p
//	n += g*g
//	p = 0                                                 if |z| <= l1
//	p = -(z - sign(z)*l1) / ((beta + sqrt(n))/alpha + 2*l2)  otherwise
//
// This is TF's ApplyFtrl formula (linear, quadratic = sqrt(accum)/lr + 2*l2)
// with the paper's beta added to the quadratic term. The L2 term is TF's:
// TF's l2 is the coefficient of l2*p*p in the loss, so it enters as 2*l2 where
// the paper's lambda2 enters as lambda2; set L2 to lambda2/2 to get the
// paper's figure. TF1's FtrlOptimizer has no beta (it behaves as beta = 0);
// Keras's Ftrl(beta=b) is this rule with FTRLBeta b. Because a zero
// hyper-parameter in Config means "default", FTRLBeta cannot be set to 0:
// a TF1 FTRL job gets beta = 1, which damps the first steps of rarely seen
// coordinates slightly more than TF1 did. The parameter p is read as the
// paper's w_t, so a coordinate that starts away from 0 stays there until its
// first gradient, as in TF.
//
// # Precision
//
// Parameters and state are stored as float32. Each coordinate's arithmetic is
// done in float64 and rounded once when stored, so p - update is correctly
// rounded however small the update, and sums such as FTRL's
// sqrt(n+g*g) - sqrt(n) do not lose bits to float32 rounding mid-formula.
// For SGD and Momentum this is free (the loops wait on memory). For Adagrad,
// Adam and FTRL, whose loops wait on square roots and divisions, float64
// costs up to about 1.5-1.8x against all-float32 arithmetic on one core; use
// ApplyParallel where that matters. Results may differ from TensorFlow's
// float32 kernels in the last bit. Adam's lr_t is computed once per Update
// call, in float64.
//
// On amd64 CPUs with AVX2, SGD, Momentum, Adagrad, Adam, AdamW, RMSProp (not
// centered), FTRL (without l2 shrinkage), Adadelta, ProximalSGD and
// ProximalAdagrad run their loops four float64 lanes at a time in Go
// assembly: the same operations in the same order, each correctly rounded,
// so the results are the scalar loop's bits (a NaN may come out with another
// NaN's sign). Build with -tags purego to use the scalar loops everywhere, or
// run with GODEBUG=cpu.avx2=off to use them in one process (as on a CPU
// without AVX2).
//
// Update panics if grad or a state slice is not as long as param, or state
// does not hold StateSlots() slices: that is a bug in the caller, which should
// have rejected the request that carried the wrong length.
//
// The rules are per-coordinate, so splitting a slice changes nothing:
// ApplyParallel gives the same bits as one Update over the whole slice.
// LAMB is the exception (PerCoordinate): its trust ratio is a norm over the
// slice it is given, so it is applied whole.
//
// # Schedules
//
// A rule's rate is fixed by New; WithRate gives the same rule at another
// rate, sharing nothing mutable. Scheduled wraps a rule with its Schedule
// (Config.Schedule, parsed by ParseSchedule) and the RateChanges the chief
// makes while training, and At(step) returns the rule at the rate in force
// at a global step: a pure function of the step.
package optim
