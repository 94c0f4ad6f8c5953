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
	"google.golang.org/protobuf/proto"

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
		grpc.WithChainUnaryInterceptor(busyRetry(), versionCheck()),
		grpc.WithChainStreamInterceptor(versionStream()),
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

// IsDeadline reports whether err is a call's deadline passing, as the
// ps's side or this one saw it (the ps may end a call on the deadline it
// was passed before the caller's context does), so that a caller can tell
// a ps slow to answer from one that refused.
func IsDeadline(err error) bool { return isDeadline(err) || errors.Is(err, context.DeadlineExceeded) }

// versionCheck is the worker's half of the version handshake: every call
// carries this worker's protocol version, and an answer from a ps of
// another protocol version is refused naming both. A ps that refused the
// call itself (its FailedPrecondition carries the VERSION_MISMATCH detail,
// and its answer the ps's version) gives ErrVersion as well.
func versionCheck() grpc.UnaryClientInterceptor {
	pairs := versionPairs()
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx = metadata.AppendToOutgoingContext(ctx, pairs...)
		var hdr metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&hdr))...)
		return versionError(err, hdr)
	}
}

// versionPairs is the metadata of the version handshake.
func versionPairs() []string {
	v := version.Get()
	return []string{version.Header, strconv.Itoa(version.Current()), version.SoftwareHeader, v.Software()}
}

// versionStream is versionCheck's first half for streams: every stream
// carries this worker's protocol version (callInPieces checks the
// answer's).
func versionStream() grpc.StreamClientInterceptor {
	pairs := versionPairs()
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(metadata.AppendToOutgoingContext(ctx, pairs...), desc, cc, method, opts...)
	}
}

// versionError is err, or ErrVersion where the ps refused this worker's
// protocol version or its answer's header hdr names another.
func versionError(err error, hdr metadata.MD) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition && hasReason(st, wire.ReasonVersionMismatch) {
		// The ps's refusal, which names both versions as it sees them.
		return withKind(ErrVersion, errors.New(st.Message()))
	}
	if e := version.Mismatch("this worker", "the ps", first(hdr.Get(version.Header)), first(hdr.Get(version.SoftwareHeader))); e != nil {
		return withKind(ErrVersion, e)
	}
	return err
}

// busyWait is how long a call refused as busy (the ps's gRPC calls hold
// all they may: ResourceExhausted with the reason wire.ReasonBusy) is
// tried again, after 50 ms, 100 ms, ... at most 1 s apart, before its
// refusal is returned.
const busyWait = 10 * time.Second

// retryBusy runs call until it is not refused as busy, busyWait has passed
// or ctx ends.
func retryBusy[T any](ctx context.Context, call func() (T, error)) (T, error) {
	delay, deadline := 50*time.Millisecond, time.Now().Add(busyWait)
	for {
		v, err := call()
		st, ok := status.FromError(err)
		if err == nil || !ok || st.Code() != codes.ResourceExhausted || !hasReason(st, wire.ReasonBusy) || time.Now().Add(delay).After(deadline) {
			return v, err
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return v, err
		}
		delay = min(2*delay, time.Second)
	}
}

// busyRetry is retryBusy for every unary call.
func busyRetry() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		_, err := retryBusy(ctx, func() (struct{}, error) { return struct{}{}, invoker(ctx, method, req, reply, cc, opts...) })
		return err
	}
}

// The calls whose requests may be large go whole when they are at most
// wire.GRPCPiece bytes, and otherwise in pieces (the ps reads no message
// over wire.GRPCMaxMessage).

func (c *Client) callInit(ctx context.Context, i int, req *pb.InitRequest) (*pb.InitResponse, error) {
	return callInPieces(ctx, req, c.ps[i].Init, c.ps[i].InitPieces)
}

func (c *Client) callPush(ctx context.Context, i int, req *pb.PushRequest) (*pb.PushResponse, error) {
	return callInPieces(ctx, req, c.ps[i].Push, c.ps[i].PushPieces)
}

func (c *Client) callPull(ctx context.Context, i int, req *pb.PullRequest) (*pb.PullResponse, error) {
	return callInPieces(ctx, req, c.ps[i].Pull, c.ps[i].PullPieces)
}

func (c *Client) callPushPull(ctx context.Context, i int, req *pb.PushPullRequest) (*pb.PullResponse, error) {
	return callInPieces(ctx, req, c.ps[i].PushPull, c.ps[i].PushPullPieces)
}

// callInPieces calls whole(req), or, for a request over wire.GRPCPiece
// bytes, sends it in pieces on a stream of open.
func callInPieces[Req proto.Message, Resp any](ctx context.Context, req Req,
	whole func(context.Context, Req, ...grpc.CallOption) (*Resp, error),
	open func(context.Context, ...grpc.CallOption) (grpc.ClientStreamingClient[pb.Piece, Resp], error)) (*Resp, error) {
	if proto.Size(req) <= wire.GRPCPiece {
		return whole(ctx, req)
	}
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	return retryBusy(ctx, func() (*Resp, error) {
		st, err := open(ctx)
		if err != nil {
			return nil, err
		}
		for off := 0; off < len(b); off += wire.GRPCPiece {
			p := &pb.Piece{Data: b[off:min(off+wire.GRPCPiece, len(b))]}
			if off == 0 {
				p.Size = int64(len(b))
			}
			if err := st.Send(p); err != nil {
				// The ps ended the call (a refusal): its status comes
				// with the answer.
				break
			}
		}
		resp, err := st.CloseAndRecv()
		hdr, _ := st.Header()
		return resp, versionError(err, hdr)
	})
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
