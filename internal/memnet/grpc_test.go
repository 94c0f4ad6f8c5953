package memnet_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/memnet"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// The real ps (its gRPC service behind the port shared with the binary
// protocol) serves over the in-memory network, and a partition makes a
// call with a deadline fail instead of hang.
func TestAPSServesOverTheNetworkAndAPartitionIsSeen(t *testing.T) {
	n := memnet.New()
	lis, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- server.ServeListener(ctx, lis, server.New(server.Config{NumWorkers: 1})) }()
	defer func() {
		cancel()
		<-served
	}()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return n.Dial(ctx, addr) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ps := pb.NewParamServerClient(conn)
	call := func() error {
		cctx, ccancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer ccancel()
		_, err := ps.Status(cctx, &pb.StatusRequest{})
		return err
	}
	if err := call(); err != nil {
		t.Fatalf("Status over the in-memory network: %v", err)
	}
	n.Partition(lis.Addr().String())
	if err := call(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Status across a partition: %v, want DeadlineExceeded", err)
	}
	n.Heal(lis.Addr().String())
	n.Reset(lis.Addr().String()) // the partitioned connection's bytes are lost: start afresh
	deadline := time.Now().Add(10 * time.Second)
	for call() != nil {
		if time.Now().After(deadline) {
			t.Fatal("Status did not succeed again within 10s of healing")
		}
	}
}
