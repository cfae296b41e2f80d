package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

const queueColumns = `name, ordering = 'fifo', max_delivery_count, lock_duration_ms, dedup_window_ms,
	default_ttl_ms, dead_letter_on_ttl, dlq_max_age_ms, dlq_max_count, dlq_max_bytes, dedup_by_body,
	created_at, updated_at, paused_at`

// CreateQueue inserts q; a name in use by a queue or a topic is
// errs.ErrQueueExists.
func CreateQueue(ctx context.Context, db DBTX, q Queue, now int64) error {
	if topic, err := isTopic(ctx, db, q.Name); err != nil || topic {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %q is a topic", errs.ErrQueueExists, q.Name)
	}
	res, err := db.ExecContext(ctx, `INSERT INTO mqlite_queues (name, ordering, max_delivery_count,
		lock_duration_ms, dedup_window_ms, default_ttl_ms, dead_letter_on_ttl,
		dlq_max_age_ms, dlq_max_count, dlq_max_bytes, dedup_by_body, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`,
		q.Name, driver.Ordering(q.FIFO), q.MaxDeliveryCount, q.LockDurationMS, q.DedupWindowMS,
		q.DefaultTTLMS, q.DeadLetterOnExpire, q.DLQMaxAgeMS, q.DLQMaxCount, q.DLQMaxBytes, q.DedupByBody, now, now)
	if err != nil {
		return fmt.Errorf("create queue: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q", errs.ErrQueueExists, q.Name)
	}
	return nil
}

// UpdateQueue replaces the settings of an existing queue. Its ordering can
// not change while it holds messages, since the order already promised to
// grouped messages would silently change.
func UpdateQueue(ctx context.Context, db DBTX, q Queue, now int64) error {
	cur, err := GetQueue(ctx, db, q.Name)
	if err != nil {
		return err
	}
	if cur.FIFO != q.FIFO {
		var n int
		if err := db.QueryRowContext(ctx,
			`SELECT count(*) FROM (SELECT 1 FROM mqlite_messages WHERE queue = ? AND `+notCompleted+` LIMIT 1)`, q.Name).Scan(&n); err != nil {
			return fmt.Errorf("update queue: %w", err)
		}
		if n > 0 {
			return errs.Invalidf(errs.ErrInvalidOrdering, "ordering of a queue that holds messages cannot change")
		}
	}
	_, err = db.ExecContext(ctx, `UPDATE mqlite_queues SET ordering = ?, max_delivery_count = ?,
		lock_duration_ms = ?, dedup_window_ms = ?, default_ttl_ms = ?, dead_letter_on_ttl = ?,
		dlq_max_age_ms = ?, dlq_max_count = ?, dlq_max_bytes = ?, dedup_by_body = ?, updated_at = ?
		WHERE name = ?`,
		driver.Ordering(q.FIFO), q.MaxDeliveryCount, q.LockDurationMS, q.DedupWindowMS, q.DefaultTTLMS,
		q.DeadLetterOnExpire, q.DLQMaxAgeMS, q.DLQMaxCount, q.DLQMaxBytes, q.DedupByBody, now, q.Name)
	if err != nil {
		return fmt.Errorf("update queue: %w", err)
	}
	return nil
}

// SetPaused pauses the queue at at (epoch ms), or resumes it for at = 0.
// Pausing a paused queue keeps the moment it was first paused. A missing
// queue is errs.ErrQueueNotFound.
func SetPaused(ctx context.Context, db DBTX, name string, at int64) error {
	res, err := db.ExecContext(ctx, `UPDATE mqlite_queues
		SET paused_at = CASE WHEN ?2 = 0 THEN 0 WHEN paused_at = 0 THEN ?2 ELSE paused_at END
		WHERE name = ?1`, name, at)
	if err != nil {
		return fmt.Errorf("pause queue: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q", errs.ErrQueueNotFound, name)
	}
	return nil
}

// DeleteQueue removes a queue with all its messages, dedup rows, receipts
// and attempts, and its subscription to a topic if it has one.
func DeleteQueue(ctx context.Context, db DBTX, name string) error {
	if _, err := GetQueue(ctx, db, name); err != nil {
		return err
	}
	for _, stmt := range []string{
		`DELETE FROM mqlite_messages WHERE queue = ?`,
		`DELETE FROM mqlite_dedup WHERE queue = ?`,
		`DELETE FROM mqlite_settlement_receipts WHERE queue = ?`,
		`DELETE FROM mqlite_receive_attempts WHERE queue = ?`,
		`DELETE FROM mqlite_subscriptions WHERE queue = ?`,
		`DELETE FROM mqlite_queues WHERE name = ?`,
	} {
		if _, err := db.ExecContext(ctx, stmt, name); err != nil {
			return fmt.Errorf("delete queue: %w", err)
		}
	}
	return nil
}

// GetQueue reads one queue; a missing one is errs.ErrQueueNotFound.
func GetQueue(ctx context.Context, db DBTX, name string) (Queue, error) {
	q, err := driver.ScanQueue(db.QueryRowContext(ctx, `SELECT `+queueColumns+` FROM mqlite_queues WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Queue{}, fmt.Errorf("%w: %q", errs.ErrQueueNotFound, name)
	}
	if err != nil {
		return Queue{}, fmt.Errorf("get queue: %w", err)
	}
	return q, nil
}

// ListQueues returns every queue in name order.
func ListQueues(ctx context.Context, db DBTX) ([]Queue, error) {
	rows, err := db.QueryContext(ctx, `SELECT `+queueColumns+` FROM mqlite_queues ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return driver.ReadQueues(rows)
}

// scanner is a *sql.Row or *sql.Rows.
type scanner = driver.Scanner
