// Package pb holds the Go code generated from proto/paramserv.proto.
package pb

//go:generate protoc -I ../../../proto --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative ../../../proto/paramserv.proto
