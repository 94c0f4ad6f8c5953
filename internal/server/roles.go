package server

import (
	"fmt"
	"net"

	"github.com/paramserv/paramserv/internal/secure"
)

// Roles bound to certificates (docs/SECURITY.md). Under TLS every
// connection's peer proved a task (secure.PeerTask): worker i pushes,
// pulls and says Done only as worker i; only the chief (worker 0)
// initialises, checkpoints and restores; a ps's certificate is no worker.
// Status is open to every task. Without TLS (plain, or a token alone) a
// connection proves no task and every role is open to it.

// peerTasker is a connection that knows the task its peer proved.
type peerTasker interface {
	PeerTask() (job string, index int, ok bool)
}

// peerTask is the task conn's peer proved, if any.
func peerTask(conn net.Conn) (secure.Task, bool) {
	if pt, ok := conn.(peerTasker); ok {
		if job, i, ok := pt.PeerTask(); ok {
			return secure.Task{Job: job, Index: i}, true
		}
	}
	return secure.Task{}, false
}

// PeerTask is the task the connection's peer proved (the mux's gRPC
// connections wrap secure's).
func (c *replayConn) PeerTask() (string, int, bool) {
	t, ok := peerTask(c.Conn)
	return t.Job, t.Index, ok
}

// allowed says why task may not make the call method with req, or nil.
func allowed(task secure.Task, method string, req any) error {
	switch method {
	case "Status":
		return nil
	case "Init", "Checkpoint", "Restore", "ChangeRate":
		if task != (secure.Task{Job: "worker", Index: 0}) {
			return fmt.Errorf("%s: only the chief (worker 0) may call it; this connection's certificate is %s's", method, task)
		}
		return nil
	case "Push", "Pull", "PushPull", "Done", "Collective":
		w, ok := req.(workerOf)
		if !ok {
			return nil
		}
		return asWorker(task, method, w.GetWorker())
	}
	return nil
}

// asWorker says why task may not act as worker w, or nil.
func asWorker(task secure.Task, what string, w int32) error {
	if task.Job != "worker" || int32(task.Index) != w {
		return fmt.Errorf("%s as worker %d: this connection's certificate is %s's (a task acts only as itself)", what, w, task)
	}
	return nil
}
