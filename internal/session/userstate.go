package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/paramserv/paramserv/internal/checkpoint"
)

// DeferSaves makes the chief's checkpoints carry a state of the program's
// own: a push no longer saves the checkpoint that is due; the program asks
// SaveDue after each and, when due, calls Save with its state. Done saves
// the final one with the state given last to SetFinalState.
func (s *Session) DeferSaves() { s.deferSaves = true }

// SaveDue reports whether the chief's checkpoint is due at the session's
// step (DeferSaves); false on the other workers.
func (s *Session) SaveDue() bool { return s.w.Due(s.step) }

// Save saves the chief's checkpoint of the session's step with state, the
// program's own bytes, when it is due (DeferSaves). A ps that failed
// meanwhile is not an error: the save is tried at the next step.
func (s *Session) Save(ctx context.Context, state []byte) error {
	s.w.SetState(state)
	if err := s.w.Stepped(ctx, s.step); err != nil {
		return fmt.Errorf("session: worker %d: checkpoint of step %d: %w", s.worker, s.step, err)
	}
	s.w.SetState(nil)
	return nil
}

// SetFinalState gives the checkpoint that Done saves the program's state.
func (s *Session) SetFinalState(state []byte) { s.w.SetState(state) }

// ResumeState is the program's state saved with the checkpoint the ps
// restored (at their start, or in a recovery since), and that
// checkpoint's step; nil and -1 when the ps restored none, when that
// checkpoint holds no state (a fresh job's first), or without a
// checkpoint directory this worker can read (Config.CheckpointDir).
func (s *Session) ResumeState(ctx context.Context) ([]byte, int64, error) {
	if s.cfg.CheckpointDir == "" {
		return nil, -1, nil
	}
	statuses, err := s.c.Status(ctx)
	if err != nil {
		return nil, -1, fmt.Errorf("session: worker %d: resume state: %w", s.worker, err)
	}
	step := int64(-1)
	if len(statuses) > 0 {
		step = statuses[0].GetRestoredStep()
	}
	if step < 0 {
		return nil, -1, nil
	}
	b, err := checkpoint.ReadUserState(s.cfg.FS, s.cfg.CheckpointDir, step)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, step, nil
	}
	if err != nil {
		return nil, step, fmt.Errorf("session: worker %d: resume state: %w", s.worker, err)
	}
	return b, step, nil
}
