package paramserv_test

import (
	"log"
	"net"
	"strconv"

	"github.com/paramserv/paramserv/internal/local"
)

// freeLoopbackAddr returns a free 127.0.0.1 address for an example's ps to
// listen on later, from below the kernel's ephemeral range: a port found by
// listening on port 0 and closing could be handed to another socket before
// the ps binds it.
func freeLoopbackAddr() string {
	ports, err := local.FreePorts(1)
	if err != nil {
		log.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
}
