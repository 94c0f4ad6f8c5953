package client

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/version"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// The client's gRPC edge, the one file that imports gRPC: the connection's
// options, what a gRPC status means to the client (its code and ErrorInfo
// detail read as the ps's error kind), and the metadata of every call (the
// version handshake, Status's wait for Init). The calls themselves use the
// generated client (wire/pb); the data path (datapath.go and the files it
// names) never sees a gRPC status.

// grpcConn is a gRPC connection to one ps.
type grpcConn = grpc.ClientConn

// Conn returns the connection to ps i, for callers that speak further
// services over it.
func (c *Client) Conn(i int) *grpc.ClientConn { return c.conns[i] }

// dialGRPC makes the gRPC connection to the ps at addr (through dial, if
// set): messages up to 1 GiB, 64 MiB flow-control windows, the version
// handshake, and reconnects at least every 2s.
func dialGRPC(addr string, dial func(context.Context, string) (net.Conn, error)) (*grpc.ClientConn, error) {
	target, dialOpts := GRPCTarget(addr, dial != nil), []grpc.DialOption(nil)
	if dial != nil {
		dialOpts = append(dialOpts, grpc.WithContextDialer(dial))
	}
	return grpc.NewClient(target, append(dialOpts,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)),
		grpc.WithInitialWindowSize(64<<20),
		grpc.WithInitialConnWindowSize(64<<20),
		grpc.WithChainUnaryInterceptor(versionCheck()),
		grpc.WithReadBufferSize(256<<10),
		grpc.WithWriteBufferSize(256<<10),
		// A ps that restarts is back in seconds; gRPC's default
		// reconnect backoff grows to 2 minutes, longer than a worker's
		// recovery should wait to see it. Reconnect at least every 2s.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	)...)
}

// GRPCTarget is the gRPC target that dials the ps at addr (host:port) as
// it is: through a dialer of the caller's (dialed), or with an IPv6 zone
// ([fe80::1%eth0]:2222), escaped for gRPC's target URL and passed through,
// as gRPC's DNS resolver takes no zone (before, a zone failed a worker,
// and paramserv status, with exit 1); otherwise addr itself.
func GRPCTarget(addr string, dialed bool) string {
	if dialed || strings.Contains(addr, "%") {
		return "passthrough:///" + strings.ReplaceAll(addr, "%", "%25")
	}
	return addr
}

// withWaitInit asks a Status call to wait for the chief's Init up to d.
func withWaitInit(ctx context.Context, d string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, version.WaitInitHeader, d)
}

// statusRequest is a Status call that names this worker, so that the ps
// counts a worker that only polls Status as heard from.
func (c *Client) statusRequest() *pb.StatusRequest {
	w := int32(c.opts.Worker)
	return &pb.StatusRequest{Worker: &w}
}

// ping asks ps i for its status, waiting for the connection to be ready:
// the health check of probe.go.
func (c *Client) ping(ctx context.Context, i int) error {
	_, err := c.ps[i].Status(ctx, c.statusRequest(), grpc.WaitForReady(true))
	return err
}

// classifyStatus gives a gRPC status error from ps i its client kind, by
// the kind of the ps's error its code and detail stand for.
func (c *Client) classifyStatus(i int, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	kind := wire.KindOfGRPCCode(uint32(st.Code()))
	if st.Code() == codes.FailedPrecondition && hasReason(st, wire.ReasonLayoutConflict) {
		// A repeated Init with another layout (the ps restored or was
		// given another model): the shard's Conflict, marked by the
		// server's ErrorInfo detail (server.statusOf).
		kind = wire.KindConflict
		if flag := conflictFlag(st); flag != "" {
			// Not another model: a training flag (or the initial values)
			// differs from what the ps holds, as the ps's message says.
			return &LayoutError{PS: i, Addr: c.addrs[i], Detail: st.Message(), Flag: flag}
		}
	}
	switch kind {
	case wire.KindUnavailable, wire.KindConflict, wire.KindNotReady, wire.KindRestored:
		return c.ofKind(i, kind, st.Message(), err)
	}
	return err
}

// hasReason reports whether st carries the server's ErrorInfo detail of
// the given reason.
func hasReason(st *status.Status, reason string) bool {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.Domain == wire.ErrorDomain && ei.Reason == reason {
			return true
		}
	}
	return false
}

// conflictFlag is the training flag a layout conflict's ErrorInfo names
// (server.statusOf), or "".
func conflictFlag(st *status.Status) string {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.Domain == wire.ErrorDomain && ei.Reason == wire.ReasonLayoutConflict {
			return ei.Metadata["flag"]
		}
	}
	return ""
}

// isDeadline reports whether err is a gRPC call's deadline.
func isDeadline(err error) bool { return status.Code(err) == codes.DeadlineExceeded }

// versionCheck is the worker's half of the version handshake: every call
// carries this worker's protocol version, and an answer from a ps of
// another protocol version is refused naming both. A ps that refused the
// call itself (its FailedPrecondition carries the VERSION_MISMATCH detail,
// and its answer the ps's version) gives ErrVersion as well.
func versionCheck() grpc.UnaryClientInterceptor {
	v := version.Get()
	pairs := []string{version.Header, strconv.Itoa(version.Current()), version.SoftwareHeader, v.Software()}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx = metadata.AppendToOutgoingContext(ctx, pairs...)
		var hdr metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&hdr))...)
		if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition && hasReason(st, wire.ReasonVersionMismatch) {
			// The ps's refusal, which names both versions as it sees them.
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
