package client

import (
	"context"
	"net/http"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

// Purge removes the messages of queue in opts.State, as Store.Purge.
func (c *Client) Purge(ctx context.Context, queue string, opts mqlite.PurgeOptions) (int, error) {
	var out wire.CountResponse
	err := c.do(ctx, call{method: http.MethodPost, path: qpath(queue, "/purge"), in: wire.PurgeRequest{State: string(opts.State), Seqs: opts.Seqs}, out: &out})
	return out.Count, err
}

// Stats counts the messages of queue per state, as Store.Stats.
func (c *Client) Stats(ctx context.Context, queue string) (mqlite.QueueStats, error) {
	var out wire.Stats
	if err := c.do(ctx, call{method: http.MethodGet, path: qpath(queue, "/stats"), out: &out}); err != nil {
		return mqlite.QueueStats{}, err
	}
	return out.QueueStats(), nil
}

// CreateQueue creates a queue, as Store.CreateQueue.
func (c *Client) CreateQueue(ctx context.Context, name string, opts mqlite.QueueOptions) error {
	return c.do(ctx, call{method: http.MethodPost, path: "/v1/queues",
		in: wire.CreateQueueRequest{Name: name, Options: wire.FromQueueOptions(opts)}})
}

// UpdateQueue replaces the options of a queue, as Store.UpdateQueue.
func (c *Client) UpdateQueue(ctx context.Context, name string, opts mqlite.QueueOptions) error {
	return c.do(ctx, call{method: http.MethodPut, path: qpath(name, ""),
		in: wire.UpdateQueueRequest{Options: wire.FromQueueOptions(opts)}})
}

// GetQueue returns one queue, as Store.GetQueue.
func (c *Client) GetQueue(ctx context.Context, name string) (mqlite.QueueInfo, error) {
	var out wire.QueueInfo
	if err := c.do(ctx, call{method: http.MethodGet, path: qpath(name, ""), out: &out}); err != nil {
		return mqlite.QueueInfo{}, err
	}
	return out.Info()
}

// ListQueues returns the queues the key covers, in name order.
func (c *Client) ListQueues(ctx context.Context) ([]mqlite.QueueInfo, error) {
	var out wire.QueuesResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/queues", out: &out}); err != nil {
		return nil, err
	}
	res := make([]mqlite.QueueInfo, 0, len(out.Queues))
	for _, q := range out.Queues {
		info, err := q.Info()
		if err != nil {
			return nil, err
		}
		res = append(res, info)
	}
	return res, nil
}

// DeleteQueue removes a queue and everything in it, as Store.DeleteQueue.
func (c *Client) DeleteQueue(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: qpath(name, "")})
}

// PauseQueue pauses a queue, as Store.PauseQueue.
func (c *Client) PauseQueue(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodPost, path: qpath(name, "/pause")})
}

// ResumeQueue resumes a paused queue, as Store.ResumeQueue.
func (c *Client) ResumeQueue(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodPost, path: qpath(name, "/resume")})
}

// QueueCounts is one queue's counts as Client.Counts returns them: what
// mqlite.QueueMetrics keeps (messages per state, bytes, pause, receivers,
// counters) and the ages of mqlite.Store.Ages.
type QueueCounts struct {
	Queue        string `json:"queue"`
	Active       int64  `json:"active"`
	Scheduled    int64  `json:"scheduled"`
	Locked       int64  `json:"locked"`
	Deferred     int64  `json:"deferred"`
	DeadLettered int64  `json:"dead_lettered"`
	// Bytes is the sum of the queue's body lengths, dead letters included.
	Bytes int64 `json:"bytes"`
	// OldestAge is the age of the oldest message ready to claim;
	// OldestDeadLetterAge that of the oldest dead letter (0: none).
	OldestAge           time.Duration `json:"oldest_age"`
	OldestDeadLetterAge time.Duration `json:"oldest_dead_letter_age"`
	// Paused reports whether the queue is paused: a receive claims nothing.
	Paused bool `json:"paused"`
	// Consumers is how many receivers of the queue are live, Waiting how
	// many of their receives wait now, Locks how many leases they hold.
	Consumers int64                `json:"consumers"`
	Waiting   int64                `json:"waiting"`
	Locks     int64                `json:"locks"`
	Counters  mqlite.QueueCounters `json:"counters"`
}

// Counts returns the messages per state and the counters of every queue
// the key covers, in queue name order, as the broker's Store.Metrics keeps
// them: cheap however large the queues (Stats reads the indexes), but not
// brought up to date first (a lapsed lease counts as locked until a sweep).
func (c *Client) Counts(ctx context.Context) ([]QueueCounts, error) {
	var out wire.CountsResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/counts", out: &out}); err != nil {
		return nil, err
	}
	return convert(out.Queues, func(q wire.QueueCounts) QueueCounts {
		return QueueCounts{Queue: q.Queue, Active: q.Active, Scheduled: q.Scheduled, Locked: q.Locked,
			Deferred: q.Deferred, DeadLettered: q.DeadLettered, Bytes: q.Bytes,
			OldestAge:           time.Duration(q.OldestAgeMS) * time.Millisecond,
			OldestDeadLetterAge: time.Duration(q.OldestDeadLetterAgeMS) * time.Millisecond,
			Paused:              q.Paused, Consumers: q.Consumers, Waiting: q.Waiting, Locks: q.Locks,
			Counters: mqlite.QueueCounters(q.Counters)}
	}), nil
}
