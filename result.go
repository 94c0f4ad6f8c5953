package paramserv

import "github.com/paramserv/paramserv/internal/trainer"

// WriteResultFile writes v as indented JSON to path, atomically (a
// temporary file beside it, then a rename), so that a reader never sees half
// a result: the way Run and the built-in models write --result_file, for a
// program with its own loop to do the same.
func WriteResultFile(path string, v any) error {
	return trainer.WriteJSON(path, v)
}
