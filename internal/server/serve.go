package server

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paramserv/paramserv/internal/wire/pb"
)

// ListenError is returned by Serve when the ps cannot listen on its
// address (the port is in use, the host is not local, ...).
type ListenError struct {
	Addr string
	Err  error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("cannot listen on %s: %v (is another process using the port, or is the host not an address of this machine?)", e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// GRPCOptions are the server options shared by every ps: large messages
// (a dense variable travels in one message) and large flow-control windows.
func GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(1 << 30),
		grpc.MaxSendMsgSize(1 << 30),
		grpc.InitialWindowSize(64 << 20),
		grpc.InitialConnWindowSize(64 << 20),
		grpc.ReadBufferSize(256 << 10),
		grpc.WriteBufferSize(256 << 10),
		// A connection that has not sent its preface and settings by
		// then is closed (issue 28: idle "PRI *" connections held
		// descriptors for gRPC's default of 120 s).
		grpc.ConnectionTimeout(sniffTimeout),
		// The task each connection's certificate proved, and what it may
		// call (roles.go).
		grpc.Creds(taskCreds{insecure.NewCredentials()}),
		grpc.ChainUnaryInterceptor(roleCheck),
	}
}

// Serve listens on addr and serves s until every worker is done (unless
// WaitForever) or ctx ends, then stops gracefully, giving in-flight calls a
// few seconds. It returns nil after a normal end.
func Serve(ctx context.Context, addr string, s *Server) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return &ListenError{Addr: addr, Err: err}
	}
	return ServeListener(ctx, lis, s)
}

// ServeListener is Serve on an existing listener.
func ServeListener(ctx context.Context, lis net.Listener, s *Server) error {
	g := grpc.NewServer(append(GRPCOptions(), s.GRPCLimit(), grpc.ChainUnaryInterceptor(versionCheck(s.cfg.Logf)), grpc.ConnectionTimeout(s.handshakeTimeout()))...)
	pb.RegisterParamServerServer(g, s)
	// One port for both: data-path connections are served by s, every
	// other one by gRPC (mux.go).
	m := newMux(lis, s)
	go m.run()
	defer m.close()
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(m.grpcListener()) }()
	s.cfg.Logf("serving on %s", lis.Addr())
	allDone := s.AllDone()
	if s.cfg.WaitForever {
		allDone = nil
	}
	select {
	case err := <-errc:
		return fmt.Errorf("grpc server on %s: %w", lis.Addr(), err)
	case <-allDone:
		s.cfg.Logf("every worker has finished; shutting down")
	case <-ctx.Done():
		s.cfg.Logf("stopping: %v", context.Cause(ctx))
	}
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		s.cfg.Logf("in-flight calls did not finish within 5s; closing them")
		g.Stop()
	}
	return nil
}
