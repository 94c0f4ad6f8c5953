package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry holding the Go runtime's and the
// process's collectors, to which PS and Worker add theirs.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Server is a running metrics endpoint.
type Server struct {
	// Addr is the address it listens on (the port chosen when the one
	// asked for was 0).
	Addr string
	srv  *http.Server
	done chan struct{}
}

// ListenError is Serve's error when it cannot listen on its address.
type ListenError struct {
	Addr string
	Err  error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("--metrics_addr=%s: cannot listen: %v (is the port in use, or the host not an address of this machine?)", e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// Serve listens on addr (HOST:PORT; port 0 picks a free one) and serves
// reg's metrics at /metrics and page, if not nil, at /. It logs once where
// the metrics are.
func Serve(addr string, reg *prometheus.Registry, page http.Handler, logf func(string, ...any)) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &ListenError{Addr: addr, Err: err}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: nil}))
	if page != nil {
		mux.Handle("/", page)
	}
	s := &Server{
		Addr: lis.Addr().String(),
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) && logf != nil {
			logf("metrics: serving on %s: %v", s.Addr, err)
		}
	}()
	if logf != nil {
		logf("metrics: http://%s/metrics", s.Addr)
	}
	return s, nil
}

// Close stops the endpoint, giving a scrape in flight a second to end.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	return err
}

// latencyBuckets are the request and step time buckets: 50µs to ~6.5s.
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 18)

// checkpointBuckets are checkpoint save and restore time buckets: 1ms to ~4.4min.
var checkpointBuckets = prometheus.ExponentialBuckets(1e-3, 4, 10)
