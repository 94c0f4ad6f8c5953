package optim

import "strings"

// Resolved returns cfg with the defaults its rule fills in for zero
// hyper-parameters written out (Adam's beta1 0.9, beta2 0.999, epsilon
// 1e-8, ...), so that a record of the run shows the values in force rather
// than the zeros that mean "the default". Fields the rule does not read are
// left as they are. It is the one place the defaults are written: New
// builds each rule from Resolved(cfg), and the rules' constructors take
// their hyper-parameters as given.
func Resolved(cfg Config) Config {
	def := func(v *float64, d float64) { *v = orDefault(*v, d) }
	switch strings.ToLower(cfg.Name) {
	case "momentum":
		def(&cfg.Momentum, 0.9)
	case "adagrad", "adagrad_da", "proximal_adagrad":
		def(&cfg.InitialAccumulator, 0.1)
	case "adam", "adamw":
		def(&cfg.Beta1, 0.9)
		def(&cfg.Beta2, 0.999)
		def(&cfg.Epsilon, 1e-8)
		if strings.EqualFold(cfg.Name, "adamw") {
			def(&cfg.WeightDecay, 0.01)
		}
	case "lamb":
		def(&cfg.Beta1, 0.9)
		def(&cfg.Beta2, 0.999)
		def(&cfg.Epsilon, 1e-6)
	case "ftrl":
		def(&cfg.FTRLBeta, 1)
		def(&cfg.InitialAccumulator, 0.1)
		power := cfg.FTRLPower()
		cfg.LearningRatePower = &power
	case "adadelta":
		def(&cfg.Rho, 0.95)
		def(&cfg.Epsilon, 1e-8)
	case "rmsprop":
		def(&cfg.Rho, 0.9)
		def(&cfg.Epsilon, 1e-10)
		def(&cfg.InitialAccumulator, 1)
	}
	return cfg
}
