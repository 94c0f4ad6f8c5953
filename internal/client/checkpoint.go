package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// RestartedError reports that a ps answered with a new incarnation: it
// restarted (and restored a checkpoint) or was restored, so its state may be
// from an older step than the rest of the cluster. The worker recovers
// (package trainer) and pulls again.
type RestartedError struct {
	PS   int
	Addr string
}

func (e *RestartedError) Error() string {
	return fmt.Sprintf("ps %d at %s restarted or was restored since this worker last saw it", e.PS, e.Addr)
}

// checkIncarnation compares a ps's incarnation with the one last seen.
func (c *Client) checkIncarnation(ps int, inc uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch known := c.incarnations[ps]; {
	case inc == 0 || known == inc:
		return nil
	case known == 0:
		c.incarnations[ps] = inc
		return nil
	}
	return &RestartedError{PS: ps, Addr: c.addrs[ps]}
}

// seen is the incarnation of ps last seen (0: none yet): the one the
// gradients of a push were computed against, sent with it.
func (c *Client) seen(ps int) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.incarnations[ps]
}

// Remember records the incarnations in statuses (from WaitReady or Status)
// as the ones this client has seen.
func (c *Client) Remember(statuses []*pb.StatusResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, st := range statuses {
		if st != nil {
			c.incarnations[i] = st.Incarnation
		}
	}
}

// CheckIncarnations asks every ps for its Status and reports a
// RestartedError if one has another incarnation than the one this client
// last saw (it restarted or was restored since).
func (c *Client) CheckIncarnations(ctx context.Context) error {
	_, err := c.StatusSameIncarnations(ctx)
	return err
}

// StatusSameIncarnations is Status, and a RestartedError if a ps has
// another incarnation than the one this client last saw.
func (c *Client) StatusSameIncarnations(ctx context.Context) ([]*pb.StatusResponse, error) {
	statuses, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	for i, st := range statuses {
		if err := c.checkIncarnation(i, st.Incarnation); err != nil {
			return nil, err
		}
	}
	return statuses, nil
}

// CheckpointShards asks every ps, in parallel, to write its shard of the
// checkpoint of step into dir, and returns what each wrote.
func (c *Client) CheckpointShards(ctx context.Context, dir string, step int64) ([]checkpoint.ShardInfo, error) {
	return c.CheckpointShardsIncremental(ctx, dir, step, false, -1)
}

// CheckpointShardsIncremental is CheckpointShards for a job that saves
// incremental checkpoints (incremental true): each ps writes a delta
// against the checkpoint at parent when it can (its ShardInfo says Delta),
// and a full shard otherwise; parent < 0 asks for a full checkpoint.
func (c *Client) CheckpointShardsIncremental(ctx context.Context, dir string, step int64, incremental bool, parent int64) ([]checkpoint.ShardInfo, error) {
	infos := make([]checkpoint.ShardInfo, len(c.ps))
	err := c.each(func(i int) error {
		var resp *pb.CheckpointResponse
		err := c.watched(ctx, i, func(ctx context.Context) (err error) {
			resp, err = c.ps[i].Checkpoint(ctx, &pb.CheckpointRequest{Dir: dir, Step: step, NumShards: int32(len(c.ps)), Incremental: incremental, Parent: parent})
			return err
		})
		if err != nil {
			return err
		}
		return json.Unmarshal(resp.ShardInfo, &infos[i])
	})
	return infos, err
}

// Restore has the given ps replace their state with the checkpoint of step
// in dir, and remembers their new incarnations.
func (c *Client) Restore(ctx context.Context, dir string, step int64, which []int) error {
	errs := make([]error, len(which))
	done := make(chan struct{})
	for j, i := range which {
		go func() {
			defer func() { done <- struct{}{} }()
			var resp *pb.RestoreResponse
			err := c.watched(ctx, i, func(ctx context.Context) (err error) {
				resp, err = c.ps[i].Restore(ctx, &pb.RestoreRequest{Dir: dir, Step: step})
				return err
			})
			if err != nil {
				errs[j] = fmt.Errorf("ps %d at %s: %w", i, c.addrs[i], c.classify(i, err))
				return
			}
			c.mu.Lock()
			c.incarnations[i] = resp.Incarnation
			c.mu.Unlock()
		}()
	}
	for range which {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
