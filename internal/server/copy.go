package server

import (
	"time"

	"github.com/paramserv/paramserv/internal/shard"
)

// EncodeCopy is this ps's shard as bytes, for a replica that rejoins
// (shard.EncodeCopy; docs/REPLICATION.md): CutCopy, then its bytes built
// with the lock released.
func (s *Server) EncodeCopy() ([]byte, error) {
	c := s.CutCopy()
	defer c.Release()
	return c.Encode()
}

// CutCopy is the cut of a copy of this ps's shard (shard.CutCopy), taken
// under the lock at the cost of a checkpoint's cut; its Encode reads the
// rows, those on disk included, with no lock held. Call it where no push
// can land between the log position it stands for and the cut (the
// replication loop does). Release it when done.
func (s *Server) CutCopy() *shard.CopyCut {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shard.CutCopy()
}

// InstallCopy replaces the shard by a copy another ps's EncodeCopy made,
// and wakes what waits on it.
func (s *Server) InstallCopy(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.shard.DecodeCopy(b, time.Now()); err != nil {
		return err
	}
	s.notify()
	if len(s.shard.DoneWorkers()) == s.cfg.NumWorkers && s.cfg.NumWorkers > 0 && !s.closed {
		s.closed = true
		close(s.allDone)
	}
	return nil
}

// Incarnation is the shard's incarnation id, sent in every answer.
func (s *Server) Incarnation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shard.Incarnation()
}
