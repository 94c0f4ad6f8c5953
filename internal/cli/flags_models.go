package cli

import "flag"

// modelFlags are the flags of the models written on the public API
// (the catalog's programs) that the built-in flags do not cover.
type modelFlags struct {
	dim       int
	reg       float64
	deepScale float64
	// deep_ctr: the dense layers' own rule and its learning rate.
	denseOptimizer    string
	denseLearningRate float64
}

func defineModelFlags(fs *flag.FlagSet) *modelFlags {
	f := &modelFlags{}
	fs.IntVar(&f.dim, "dim", 0, "mf: factors per user and item (default 20); deep_ctr: embedding width per field (default 8)")
	fs.Float64Var(&f.reg, "reg", 0, "mf: L2 penalty on the factors (default 0.1)")
	fs.Float64Var(&f.deepScale, "deep_scale", 0, "deep_ctr: the factor of the MLP's output in the logit, slowing the deep part against the wide one (default 0.1)")
	fs.StringVar(&f.denseOptimizer, "dense_optimizer", "", "deep_ctr: the update rule of the MLP's layers (default adam); job: --optimizer, as the tables")
	fs.Float64Var(&f.denseLearningRate, "dense_learning_rate", 0, "deep_ctr: the learning rate of --dense_optimizer (default 0.001)")
	return f
}
