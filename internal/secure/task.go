package secure

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
)

// Task is the task of a job a certificate is made for: Job "ps" or
// "worker", Index from 0. Under TLS it is what a connection's peer proved,
// and what decides the roles it may take (docs/SECURITY.md).
type Task struct {
	Job   string
	Index int
}

func (t Task) String() string { return fmt.Sprintf("%s %d", t.Job, t.Index) }

// TaskURI is the URI subject alternative name `paramserv certs` writes in
// the certificate of task job/index: paramserv://task/JOB/INDEX. A
// certificate from another CA names its task so, or by a Common Name
// JOB-INDEX ("ps-0", "worker-1").
func TaskURI(job string, index int) *url.URL {
	return &url.URL{Scheme: "paramserv", Host: "task", Path: fmt.Sprintf("/%s/%d", job, index)}
}

var (
	taskPath = regexp.MustCompile(`^/(ps|worker)/(0|[1-9][0-9]{0,8})$`)
	taskCN   = regexp.MustCompile(`^(ps|worker)-(0|[1-9][0-9]{0,8})$`)
)

// TaskOf reads the task certificate c names: its paramserv://task URI, or
// else its Common Name. A certificate that names two tasks names none.
func TaskOf(c *x509.Certificate) (Task, bool) {
	var found []Task
	for _, u := range c.URIs {
		if u.Scheme != "paramserv" || u.Host != "task" {
			continue
		}
		m := taskPath.FindStringSubmatch(u.Path)
		if m == nil {
			return Task{}, false
		}
		i, _ := strconv.Atoi(m[2])
		found = append(found, Task{Job: m[1], Index: i})
	}
	if len(found) == 0 {
		if m := taskCN.FindStringSubmatch(c.Subject.CommonName); m != nil {
			i, _ := strconv.Atoi(m[2])
			return Task{Job: m[1], Index: i}, true
		}
		return Task{}, false
	}
	if len(found) > 1 {
		return Task{}, false
	}
	return found[0], true
}

// PeerTask returns the task the peer of c proved with its certificate: c a
// connection a Policy's Listener accepted or its Dialer made, under TLS,
// once its handshake ran (its first Read or Write, or the dial). false:
// no TLS, no handshake yet, or a certificate that names no task.
func PeerTask(c net.Conn) (Task, bool) {
	var tc *tlsConn
	switch c := c.(type) {
	case *conn:
		if !c.ok.Load() {
			return Task{}, false
		}
		tc, _ = c.sec.(*tlsConn)
	case *tlsConn:
		tc = c
	}
	if tc == nil {
		return Task{}, false
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return Task{}, false
	}
	return TaskOf(certs[0])
}

// PeerTask is PeerTask(c) as a method, for packages that look for it
// through an interface without importing this one.
func (c *conn) PeerTask() (job string, index int, ok bool) {
	t, ok := PeerTask(c)
	return t.Job, t.Index, ok
}

// PeerTask: as (*conn).PeerTask, for a connection a Dialer made.
func (c *tlsConn) PeerTask() (job string, index int, ok bool) {
	t, ok := PeerTask(c)
	return t.Job, t.Index, ok
}
