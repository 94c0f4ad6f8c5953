package server

import (
	"context"
	"fmt"
	"net"
	"time"
)

// StoppedError is a ps's error when its context ended (a SIGTERM) before
// every worker had finished: the job is not done, so the ps did not
// succeed (trainer.RunPS, replication.RunPS).
type StoppedError struct {
	Task          int
	Cause         error // the context's cause
	Step          int64 // the global step then
	Done, Workers int   // workers finished, of all
}

func (e *StoppedError) Error() string {
	return fmt.Sprintf("ps %d: %v at global step %d before every worker finished (%d of %d done)", e.Task, e.Cause, e.Step, e.Done, e.Workers)
}

func (e *StoppedError) Unwrap() error { return e.Cause }

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
	g := s.newGRPC()
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
