package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

func TestDecodeDensePushMatchesProto(t *testing.T) {
	req := &pb.PushRequest{Worker: 3, Step: 12345, Grads: []*pb.DenseTensor{
		{Name: "w", Data: wire.Float32Bytes([]float32{1, -2.5, 3e-7})},
		{Name: "b", Data: wire.Float32Bytes([]float32{42})},
		{Name: "empty"},
	}}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var scratch []float32
	// Every alignment of the entry's bytes: aligned gradients are read in
	// place, the others copied into scratch.
	for shift := range 4 {
		buf := make([]byte, shift+len(b))[shift:]
		copy(buf, b)
		got, ok := decodeDensePush(buf, &scratch)
		if !ok {
			t.Fatalf("shift %d: decodeDensePush refused a dense push", shift)
		}
		if !proto.Equal(got, req) {
			t.Fatalf("shift %d: decoded %v, want %v", shift, got, req)
		}
		for i, g := range got.Grads {
			if _, err := wire.Float32s(g.Data); err != nil {
				t.Fatalf("shift %d: grad %d: %v", shift, i, err)
			}
		}
	}
	// Negative worker ids (the clients of Init and Done are not, but a
	// varint is a varint).
	neg := &pb.PushRequest{Worker: -1, Step: -2}
	nb, _ := proto.Marshal(neg)
	if got, ok := decodeDensePush(nb, &scratch); !ok || !proto.Equal(got, neg) {
		t.Fatalf("decoded %v (ok %v), want %v", got, ok, neg)
	}
}

func TestDecodeDensePushRefusesTheRest(t *testing.T) {
	var scratch []float32
	sparse, _ := proto.Marshal(&pb.PushRequest{Worker: 1, Sparse: []*pb.SparseRows{{Table: "t"}}})
	if _, ok := decodeDensePush(sparse, &scratch); ok {
		t.Error("decodeDensePush took a push with sparse rows; want it left to proto.Unmarshal")
	}
	good, _ := proto.Marshal(&pb.PushRequest{Worker: 1, Grads: []*pb.DenseTensor{{Name: "w", Data: make([]byte, 8)}}})
	for n := 3; n < len(good); n++ { // cut inside the gradients (2 bytes: the worker alone, a whole message)
		if _, ok := decodeDensePush(good[:n], &scratch); ok {
			t.Errorf("decodeDensePush took the first %d of %d bytes", n, len(good))
		}
	}
}
