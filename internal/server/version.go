package server

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/version"
	"github.com/paramserv/paramserv/internal/wire"
)

// versionCheck is the ps's half of the version handshake (package
// version): every answer carries the ps's protocol version, and a call
// from a worker of another protocol version is refused with
// FailedPrecondition naming both, marked by an ErrorInfo detail of reason
// VERSION_MISMATCH.
func versionCheck(logf func(string, ...any)) grpc.UnaryServerInterceptor {
	v := version.Get()
	hdr := metadata.Pairs(version.Header, strconv.Itoa(version.Current()), version.SoftwareHeader, v.Software())
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, hdr)
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if err := version.Mismatch("this ps", "the worker", first(md.Get(version.Header)), first(md.Get(version.SoftwareHeader))); err != nil {
				logf("refused %s: %v", info.FullMethod, err)
				st := status.New(codes.FailedPrecondition, err.Error())
				if d, derr := st.WithDetails(&errdetails.ErrorInfo{Domain: wire.ErrorDomain, Reason: wire.ReasonVersionMismatch}); derr == nil {
					st = d
				}
				return nil, st.Err()
			}
		}
		return handler(ctx, req)
	}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// waitInit is the wait a Status call asks for (0: none), at most 10s.
func waitInit(ctx context.Context) time.Duration {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(first(md.Get(version.WaitInitHeader)))
	if err != nil || d <= 0 {
		return 0
	}
	return min(d, 10*time.Second)
}
