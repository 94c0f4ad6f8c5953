package client

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/version"
)

// ErrVersion: the ps speaks another wire protocol version than this worker
// (package version). Waiting does not help: run one paramserv version on
// every task.
var ErrVersion = errors.New("wire protocol versions differ")

// versionCheck is the worker's half of the version handshake: every call
// carries this worker's protocol version, and an answer from a ps of
// another protocol version is refused naming both. A ps that refused the
// call itself (its FailedPrecondition names both too) gives ErrVersion as
// well.
func versionCheck() grpc.UnaryClientInterceptor {
	v := version.Get()
	pairs := []string{version.Header, strconv.Itoa(version.Current()), version.SoftwareHeader, v.Software()}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx = metadata.AppendToOutgoingContext(ctx, pairs...)
		var hdr metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&hdr))...)
		if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition && strings.HasPrefix(st.Message(), "wire protocol mismatch") {
			return withKind(ErrVersion, errors.New(st.Message()))
		}
		if e := version.Mismatch("this worker", "the ps", first(hdr.Get(version.Header)), first(hdr.Get(version.SoftwareHeader))); e != nil {
			return withKind(ErrVersion, e)
		}
		return err
	}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
