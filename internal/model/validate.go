package model

// Validator is a Model that can score parameters on held-out validation
// data (never the test set) while training goes on: the chief calls it
// every --steps_to_validate local steps, logs the metrics and writes them
// to its summaries, so over-fitting shows while it happens.
type Validator interface {
	// Validate returns the metrics of params on the validation data, e.g.
	// val_cross_entropy and val_accuracy.
	Validate(params Params) (map[string]float64, error)
}

// SparseValidator is a SparseModel that can score its parameters on
// validation data while training goes on, as a Validator: lookup reads
// rows of table t (index into Tables) from the ps. A model with no
// validation data returns no metrics and no error.
type SparseValidator interface {
	ValidateSparse(params Params, lookup func(t int, keys []uint64, out []float32) error) (map[string]float64, error)
}
