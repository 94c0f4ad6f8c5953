package client

import (
	"testing"

	"github.com/paramserv/paramserv/internal/model"
)

// A ps address with an IPv6 zone makes a client (before, gRPC's target
// parse refused "%lo" and the worker exited 1).
func TestIPv6ZoneAddress(t *testing.T) {
	c, err := New([]string{"[fe80::1%lo]:2222"}, []model.Variable{{Name: "w", Shape: []int{2}}}, Options{GRPCOnly: true})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.Close()
}

// What every ps would refuse is refused by every worker's client: a name
// longer than the data path takes, a shape of more values than a ps holds.
func TestVarsCheckedAtNew(t *testing.T) {
	long := make([]byte, 2000)
	for i := range long {
		long[i] = 'a'
	}
	for _, v := range []model.Variable{
		{Name: string(long), Shape: []int{2}},
		{Name: "w", Shape: []int{1 << 31, 1 << 31}},
	} {
		if c, err := New([]string{"127.0.0.1:1"}, []model.Variable{v}, Options{GRPCOnly: true}); err == nil {
			c.Close()
			t.Errorf("variable %.10q %v: New accepted it", v.Name, v.Shape)
		}
	}
}
