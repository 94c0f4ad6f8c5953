package server

import "time"

// EncodeCopy is this ps's shard as bytes, for a replica that rejoins
// (shard.EncodeCopy; docs/REPLICATION.md). The copy is taken under the
// lock; call it where no push can land between the log position it
// stands for and the copy (the replication loop does).
func (s *Server) EncodeCopy() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shard.EncodeCopy()
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
