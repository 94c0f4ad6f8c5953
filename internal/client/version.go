package client

import "errors"

// ErrVersion: the ps speaks another wire protocol version than this worker
// (package version). Waiting does not help: run one paramserv version on
// every task.
var ErrVersion = errors.New("wire protocol versions differ")
