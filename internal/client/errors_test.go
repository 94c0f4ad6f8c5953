package client

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/model"
)

// A ps that is down (connection refused) is ErrUnavailable by either path,
// a kind the worker recovers from, whatever moment of the call failed
// (here the data path's dial).
func TestDownPSIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	vars := []model.Variable{{Name: "w", Shape: []int{3}}}
	for _, grpcOnly := range []bool{false, true} {
		c, err := New([]string{addr}, vars, Options{GRPCOnly: grpcOnly})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err = c.Pull(ctx, 0, model.NewParams(vars))
		cancel()
		c.Close()
		if !errors.Is(err, ErrUnavailable) || !Retryable(err) || errors.Is(err, ErrLayout) {
			t.Errorf("gRPC only %v: pull from a ps that is down: %v; want ErrUnavailable, retryable", grpcOnly, err)
		}
	}
}
