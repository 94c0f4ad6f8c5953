package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/testutil"
	"github.com/paramserv/paramserv/internal/wire"
)

// A ps that is down (connection refused) is ErrUnavailable by either path,
// a kind the worker recovers from, whatever moment of the call failed
// (here the data path's dial).
func TestDownPSIsUnavailable(t *testing.T) {
	addr := testutil.RefusedAddr(t)
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

// A ps's layout conflict is told from "not initialised yet" (both
// FailedPrecondition) by the server's ErrorInfo detail, not by the
// message's text: with the detail it is ErrLayout, an input to fix;
// without it, whatever the message says, a ps to wait for.
func TestLayoutConflictByDetail(t *testing.T) {
	vars := []model.Variable{{Name: "w", Shape: []int{3}}}
	c, err := New([]string{"127.0.0.1:1"}, vars, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := "ps 0 is already initialised with a different layout: w has 2 values"
	conflict, err := status.New(codes.FailedPrecondition, msg).WithDetails(&errdetails.ErrorInfo{Domain: wire.ErrorDomain, Reason: wire.ReasonLayoutConflict})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.classify(0, conflict.Err()); !errors.Is(err, ErrLayout) || Retryable(err) {
		t.Errorf("FailedPrecondition with the conflict detail: %v; want ErrLayout, not retryable", err)
	}
	if err := c.classify(0, status.Error(codes.FailedPrecondition, msg)); errors.Is(err, ErrLayout) || !Retryable(err) {
		t.Errorf("FailedPrecondition without the detail: %v; want ErrNotReady, retryable", err)
	}
}
