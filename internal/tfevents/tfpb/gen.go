// Package tfpb is the generated Go code of event.proto: the records of a
// TensorBoard event file.
package tfpb

//go:generate protoc -I . --go_out=. --go_opt=paths=source_relative event.proto
