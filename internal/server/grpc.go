package server

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	gproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/secure"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/version"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// This file is the server's one gRPC file: the service (pb.ParamServerServer),
// whose methods lock, call the work of the same name and turn its error
// into a status (statusOf), and its calls in pieces (received by
// pieces.go); the server's options, credentials, tap and interceptors (the
// bounds of membound.go, the roles of roles.go, the version handshake);
// and the reading of a status back into the shard's error kinds
// (kindOfStatus).
// The rest of the package returns the shard's errors (shard.Error, of a
// Kind), which the data path sends as they are.

// newGRPC is the gRPC server that serves s's service on the connections
// the mux hands it.
func (s *Server) newGRPC() *grpc.Server { return s.NewGRPC(s) }

// Service is the ps's gRPC service but its calls in pieces: what a Server
// is, and what a replicated copy of a shard (package replication) is
// around one.
type Service interface {
	Init(context.Context, *pb.InitRequest) (*pb.InitResponse, error)
	Push(context.Context, *pb.PushRequest) (*pb.PushResponse, error)
	Pull(context.Context, *pb.PullRequest) (*pb.PullResponse, error)
	PushPull(context.Context, *pb.PushPullRequest) (*pb.PullResponse, error)
	Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error)
	Done(context.Context, *pb.DoneRequest) (*pb.DoneResponse, error)
	Checkpoint(context.Context, *pb.CheckpointRequest) (*pb.CheckpointResponse, error)
	Restore(context.Context, *pb.RestoreRequest) (*pb.RestoreResponse, error)
	ChangeRate(context.Context, *pb.ChangeRateRequest) (*pb.ChangeRateResponse, error)
	Collective(context.Context, *pb.CollectiveRequest) (*pb.CollectiveResponse, error)
}

// NewGRPC is the gRPC server that serves impl (s itself, or a replicated
// copy of its shard around it) on the connections s's mux hands it, with
// s's bounds (membound.go): messages of at most wire.GRPCMaxMessage,
// larger requests in pieces (received by s, then handed to impl with the
// checks of a request sent whole), and every call counted against what all
// calls may hold from the moment its stream opens.
func (s *Server) NewGRPC(impl Service) *grpc.Server {
	chain := chainUnary(s.holdDecoded, roleCheck, versionCheck(s.cfg.Logf))
	g := grpc.NewServer(append(GRPCOptions(), s.GRPCLimit(),
		grpc.UnaryInterceptor(chain),
		grpc.InTapHandle(s.tapStream),
		grpc.ConnectionTimeout(s.handshakeTimeout()))...)
	pb.RegisterParamServerServer(g, &grpcService{Service: impl, s: s, chain: chain})
	return g
}

// grpcService is what NewGRPC registers: impl's calls, and the calls in
// pieces, which s receives and hands to impl's through chain.
type grpcService struct {
	Service
	unimplemented
	s     *Server
	chain grpc.UnaryServerInterceptor
}

// unimplemented is one level down, so that Service's methods win over its.
type unimplemented struct {
	pb.UnimplementedParamServerServer
}

func (g *grpcService) InitPieces(st grpc.ClientStreamingServer[pb.Piece, pb.InitResponse]) error {
	return inPieces(g, st, "Init", pb.ParamServer_Init_FullMethodName, &pb.InitRequest{}, g.Service.Init)
}

func (g *grpcService) PushPieces(st grpc.ClientStreamingServer[pb.Piece, pb.PushResponse]) error {
	return inPieces(g, st, "Push", pb.ParamServer_Push_FullMethodName, &pb.PushRequest{}, g.Service.Push)
}

func (g *grpcService) PullPieces(st grpc.ClientStreamingServer[pb.Piece, pb.PullResponse]) error {
	return inPieces(g, st, "Pull", pb.ParamServer_Pull_FullMethodName, &pb.PullRequest{}, g.Service.Pull)
}

func (g *grpcService) PushPullPieces(st grpc.ClientStreamingServer[pb.Piece, pb.PullResponse]) error {
	return inPieces(g, st, "PushPull", pb.ParamServer_PushPull_FullMethodName, &pb.PushPullRequest{}, g.Service.PushPull)
}

// inPieces receives a request of method in pieces into req, then calls
// call with it through the server's interceptors, as gRPC would have had
// it come whole (its FullMethod fullMethod).
func inPieces[Req proto.Message, Resp any](g *grpcService, st grpc.ClientStreamingServer[pb.Piece, Resp], method, fullMethod string, req Req, call func(context.Context, Req) (*Resp, error)) error {
	ctx := st.Context()
	if err := g.s.receivePieces(ctx, st.Recv, method, req); err != nil {
		return grpcError(err)
	}
	info := &grpc.UnaryServerInfo{Server: g.Service, FullMethod: fullMethod}
	resp, err := g.chain(ctx, req, info, func(ctx context.Context, r any) (any, error) { return call(ctx, r.(Req)) })
	if err != nil {
		return err
	}
	return st.SendAndClose(resp.(*Resp))
}

// grpcError is statusOf, with the errors of the gRPC bounds and of
// requests in pieces given their codes.
func grpcError(err error) error {
	var be *busyError
	switch {
	case errors.As(err, &be):
		return busyStatus(be)
	case errors.Is(err, errPieceStalled):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return statusOf(err)
}

// busyStatus is the ResourceExhausted of a call refused for what all
// calls hold, marked by the reason wire.ReasonBusy, which a client tries
// again.
func busyStatus(err error) error {
	st := status.New(codes.ResourceExhausted, err.Error())
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Domain: wire.ErrorDomain, Reason: wire.ReasonBusy}); derr == nil {
		st = d
	}
	return st.Err()
}

// tapStream runs when a call's stream opens, before gRPC reads any of its
// messages: it refuses a worker of another protocol version (whose
// requests this ps may not read), and takes grpcStreamCost from the budget
// of all calls, given back when the stream ends, or refuses the call
// (ResourceExhausted, wire.ReasonBusy).
func (s *Server) tapStream(ctx context.Context, info *tap.Info) (context.Context, error) {
	if err := version.Mismatch("this ps", "the worker", first(info.Header.Get(version.Header)), first(info.Header.Get(version.SoftwareHeader))); err != nil {
		s.cfg.Logf("refused %s: %v", info.FullMethodName, err)
		return nil, versionStatus(err)
	}
	g, err := s.grpcAcquire(grpcStreamCost)
	if err != nil {
		return nil, busyStatus(err)
	}
	context.AfterFunc(ctx, g.release)
	return context.WithValue(ctx, grantKey{}, g), nil
}

// holdDecoded is the first interceptor: once a call's request is decoded,
// the call holds only its size (a pull or a barrier may wait long).
func (s *Server) holdDecoded(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if g := grantOf(ctx); g != nil {
		if m, ok := req.(proto.Message); ok {
			// Less than it held, but for an Init in pieces (outside the
			// bound): a growth past the bound is refused, and it keeps
			// what it held.
			_ = g.resize(int64(proto.Size(m)))
		}
	}
	return handler(ctx, req)
}

// chainUnary is ics as one interceptor, the first outermost (as
// grpc.ChainUnaryInterceptor), which the calls in pieces run too.
func chainUnary(ics ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		h := handler
		for i := len(ics) - 1; i >= 0; i-- {
			ic, next := ics[i], h
			h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
		}
		return h(ctx, req)
	}
}

// Init creates the shard's variables and sets the mode. A repeated Init with
// the same layout (a restarted chief) changes nothing and reports the step.
func (s *Server) Init(_ context.Context, req *pb.InitRequest) (*pb.InitResponse, error) {
	resp, err := s.initialize(req)
	return resp, statusOf(err)
}

// Push applies or accumulates gradients.
func (s *Server) Push(_ context.Context, req *pb.PushRequest) (*pb.PushResponse, error) {
	start := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	locked := time.Now()
	resp, err := s.push(req)
	s.stalls.push(start, locked)
	return resp, statusOf(err)
}

// Pull returns values once the shard's step reaches min_step.
func (s *Server) Pull(ctx context.Context, req *pb.PullRequest) (*pb.PullResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp, err := s.pull(ctx, req)
	return resp, statusOf(err)
}

// PushPull pushes, then pulls, in one round trip.
func (s *Server) PushPull(ctx context.Context, req *pb.PushPullRequest) (*pb.PullResponse, error) {
	resp, err := s.pushPull(ctx, req)
	return resp, statusOf(err)
}

// Status reports the shard's state (with details, its variables, workers
// and checkpoint directory too). A call whose metadata asks to wait for
// the chief (version.WaitInitHeader, a duration) is answered as soon as the shard
// is initialised, or when that duration has passed, so that a worker
// waiting for the chief's Init starts at once rather than at its next poll.
func (s *Server) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	return s.report(ctx, req, waitInit(ctx)), nil
}

// ChangeRate changes the job's learning rate and schedule from the step
// the request names (the chief sends it to every ps).
func (s *Server) ChangeRate(_ context.Context, req *pb.ChangeRateRequest) (*pb.ChangeRateResponse, error) {
	resp, err := s.changeRate(req)
	return resp, statusOf(err)
}

// Done records that a worker has finished.
func (s *Server) Done(_ context.Context, req *pb.DoneRequest) (*pb.DoneResponse, error) {
	resp, err := s.done(req)
	return resp, statusOf(err)
}

// Checkpoint writes this shard into dir/ckpt-<step>/, dir being the ps's
// own --checkpoint_dir. In synchronous mode the shard must be exactly at
// the requested step (else Aborted: the chief tries again at a later
// step); in asynchronous mode it is cut at its current step, which the
// answer reports.
func (s *Server) Checkpoint(_ context.Context, req *pb.CheckpointRequest) (*pb.CheckpointResponse, error) {
	resp, err := s.writeCheckpoint(req)
	return resp, statusOf(err)
}

// Restore replaces the shard's state with the checkpoint of req.Step in the
// ps's own --checkpoint_dir, aborts every waiting pull, and takes a new
// incarnation.
func (s *Server) Restore(_ context.Context, req *pb.RestoreRequest) (*pb.RestoreResponse, error) {
	resp, err := s.restoreStep(req)
	return resp, statusOf(err)
}

// statusOf maps an error of the shard to the status code its clients act
// on; every front end answers through it.
func statusOf(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	kind := kindOf(err)
	code := codes.Code(wire.GRPCCode(kind))
	st := status.New(code, err.Error())
	if kind == wire.KindConflict {
		// FailedPrecondition is also "not initialised yet", which a
		// client waits out: the detail tells it this one will not pass.
		info := &errdetails.ErrorInfo{Domain: wire.ErrorDomain, Reason: wire.ReasonLayoutConflict}
		var se *shard.Error
		if errors.As(err, &se) && se.Flag != "" {
			// Not another model: a training flag (or the initial values)
			// differs from what the ps holds.
			info.Metadata = map[string]string{"flag": se.Flag}
		}
		if d, derr := st.WithDetails(info); derr == nil {
			st = d
		}
	}
	return st.Err()
}

// kindOfStatus is the kind of the ps's error that a gRPC status error
// stands for (statusOf's inverse) and the status's message, and whether
// err carries a status.
func kindOfStatus(err error) (wire.ErrorKind, string, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, "", false
	}
	if st.Code() == codes.FailedPrecondition {
		for _, d := range st.Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.Domain == wire.ErrorDomain && ei.Reason == wire.ReasonLayoutConflict {
				return wire.KindConflict, st.Message(), true
			}
		}
	}
	return wire.KindOfGRPCCode(uint32(st.Code())), st.Message(), true
}

// GRPCOptions are the server options shared by every ps: messages of at
// most wire.GRPCMaxMessage (larger requests come in pieces), each
// stream's flow-control window grpcWindow (what a client may send before
// the ps reads), large answers (a dense variable travels in one message)
// and a large connection window for them.
func GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(wire.GRPCMaxMessage),
		grpc.MaxSendMsgSize(1 << 30),
		grpc.InitialWindowSize(grpcWindow),
		grpc.InitialConnWindowSize(64 << 20),
		// Metadata is a few short headers; gRPC's default allows 16 MiB
		// a stream.
		grpc.MaxHeaderListSize(64 << 10),
		grpc.ReadBufferSize(256 << 10),
		grpc.WriteBufferSize(256 << 10),
		// A connection that has not sent its preface and settings by
		// then is closed (issue 28: idle "PRI *" connections held
		// descriptors for gRPC's default of 120 s).
		grpc.ConnectionTimeout(sniffTimeout),
		// The task each connection's certificate proved, and what it may
		// call (roles.go; NewGRPC adds the interceptor).
		grpc.Creds(taskCreds{insecure.NewCredentials()}),
	}
}

// taskCreds are gRPC's transport credentials on a mux's connections: no
// handshake of their own (secure's listener ran it), only the task the
// peer proved, as the call's peer.AuthInfo.
type taskCreds struct {
	credentials.TransportCredentials
}

type taskInfo struct {
	credentials.CommonAuthInfo
	task secure.Task
	ok   bool
}

func (taskInfo) AuthType() string { return "paramserv-task" }

func (c taskCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	t, ok := peerTask(conn)
	return conn, taskInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, task: t, ok: ok}, nil
}

func (c taskCreds) Clone() credentials.TransportCredentials {
	return taskCreds{c.TransportCredentials.Clone()}
}

// workerOf is the worker a request names, for the calls a worker makes
// as itself.
type workerOf interface{ GetWorker() int32 }

// roleCheck refuses a call its caller's task may not make.
func roleCheck(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, _ := peer.FromContext(ctx)
	var ti taskInfo
	if p != nil {
		ti, _ = p.AuthInfo.(taskInfo)
	}
	if !ti.ok {
		return handler(ctx, req)
	}
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	if err := allowed(ti.task, method, req); err != nil {
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	return handler(ctx, req)
}

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
				return nil, versionStatus(err)
			}
		}
		return handler(ctx, req)
	}
}

// versionStatus is the FailedPrecondition of a refused protocol version,
// marked by the reason wire.ReasonVersionMismatch.
func versionStatus(err error) error {
	st := status.New(codes.FailedPrecondition, err.Error())
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Domain: wire.ErrorDomain, Reason: wire.ReasonVersionMismatch}); derr == nil {
		st = d
	}
	return st.Err()
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

// GRPCLimit is the server option that bounds each gRPC request but Init
// by this ps's layout, as its data path is: every variable's values once
// and rows of every table up to wire.MaxCachedKeys keys (before Init,
// preInitBody). A request over it fails naming both sizes and the layout
// (with code Internal: gRPC gives a codec's error no code of its own); the
// connection goes on.
func (s *Server) GRPCLimit() grpc.ServerOption {
	return grpc.ForceServerCodecV2(limitCodec{s: s, CodecV2: encoding.GetCodecV2(gproto.Name)})
}

// limitCodec is gRPC's proto codec with Server.grpcAdmit before each
// request is decoded.
type limitCodec struct {
	s *Server
	encoding.CodecV2
}

func (c limitCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if err := c.s.grpcAdmit(v, data.Len()); err != nil {
		return err
	}
	return c.CodecV2.Unmarshal(data, v)
}

// Collective is the barrier and all-reduce among the workers
// (collective.go), its errors given their gRPC codes.
func (s *Server) Collective(ctx context.Context, req *pb.CollectiveRequest) (*pb.CollectiveResponse, error) {
	resp, err := s.collective(ctx, req)
	switch {
	case err == nil:
		return resp, nil
	case errors.Is(err, errCollectiveFull):
		return nil, status.Error(codes.ResourceExhausted, strings.TrimPrefix(err.Error(), errCollectiveFull.Error()+": "))
	case errors.Is(err, errCollectiveInvalid):
		return nil, status.Error(codes.InvalidArgument, strings.TrimPrefix(err.Error(), errCollectiveInvalid.Error()+": "))
	case errors.Is(err, errCollectiveTimeout):
		return nil, status.Error(codes.DeadlineExceeded, strings.TrimPrefix(err.Error(), errCollectiveTimeout.Error()+": "))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, status.FromContextError(err).Err()
	}
	return nil, status.Error(codes.Internal, err.Error())
}
