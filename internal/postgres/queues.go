package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// queueColumns are the columns driver.ScanQueue reads, in its order.
const queueColumns = `name, ordering = 'fifo', max_delivery_count, lock_duration_ms, dedup_window_ms,
	default_ttl_ms, dead_letter_on_ttl, dlq_max_age_ms, dlq_max_count, dlq_max_bytes, dedup_by_body,
	created_at, updated_at, paused_at`

// claimName inserts name, of kind ("queue" or "topic"), into
// mqlite_names in tx: queues and topics share one namespace across two
// tables, and that table's key decides between two transactions creating
// one name at once, whatever their isolation. A name in use is taken (the
// typed error of the creation, errs.ErrQueueExists or
// errs.ErrTopicExists): one that tx sees (in mqlite_names, or as a queue
// or a topic that a process of the first layout, without mqlite_names,
// created after the upgrade), or one that another transaction inserts at
// the same moment. Under READ COMMITTED the insert waits for that
// transaction and, when it commits, inserts nothing (ON CONFLICT DO
// NOTHING), so tx stays usable; under REPEATABLE READ or SERIALIZABLE,
// whose snapshot does not see the other's row, PostgreSQL fails the insert
// with a serialization failure (SQLSTATE 40001), which is taken too, with
// that failure wrapped (tx is then aborted, as any serialization failure
// leaves it).
func claimName(ctx context.Context, tx driver.DBTX, name, kind string, taken error) error {
	var other string
	err := tx.QueryRowContext(ctx, `SELECT kind FROM mqlite_names WHERE name = $1
		UNION ALL SELECT 'queue' FROM mqlite_queues WHERE name = $1
		UNION ALL SELECT 'topic' FROM mqlite_topics WHERE name = $1 LIMIT 1`, name).Scan(&other)
	switch {
	case err == nil:
		return fmt.Errorf("%w: %q is a %s", taken, name, other)
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("create %s: %w", kind, err)
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO mqlite_names (name, kind) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, kind)
	if uniqueViolation(err) || serializationFailure(err) {
		return fmt.Errorf("%w: %q is a queue or a topic: %w", taken, name, err)
	}
	if err != nil {
		return interpret("create "+kind, err) // a read-only session: errs.ErrReadOnly
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q is a queue or a topic", taken, name)
	}
	return nil
}

// serializationFailure reports SQLSTATE 40001: under REPEATABLE READ or
// SERIALIZABLE, a row another transaction committed after the snapshot
// stands in the statement's way.
func serializationFailure(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40001"
}

// inTx runs fn in db when db is a transaction (or a connection the caller
// manages), and in a transaction of its own when db is a pool: the locks
// fn takes must last until its writes commit.
func inTx(ctx context.Context, db driver.DBTX, fn func(tx driver.DBTX) error) error {
	pool, ok := db.(*sql.DB)
	if !ok {
		return fn(db)
	}
	tx, err := pool.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// uniqueViolation reports a unique violation (SQLSTATE 23505): another
// process inserted the same key first and committed. The creations insert
// with ON CONFLICT DO NOTHING, which waits for that process and inserts
// nothing, so this is their second line: a violation on an index that is
// not the statement's arbiter.
func uniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// CreateQueue inserts q; a name in use by a queue or a topic is
// errs.ErrQueueExists, also when another transaction creates it at the
// same moment, at any isolation (claimName).
func (PostgreSQL) CreateQueue(ctx context.Context, db driver.DBTX, q driver.Queue, now int64) error {
	return inTx(ctx, db, func(tx driver.DBTX) error { return createQueue(ctx, tx, q, now) })
}

// createQueue is CreateQueue in tx.
func createQueue(ctx context.Context, tx driver.DBTX, q driver.Queue, now int64) error {
	if err := claimName(ctx, tx, q.Name, "queue", errs.ErrQueueExists); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO mqlite_queues (name, ordering, max_delivery_count,
		lock_duration_ms, dedup_window_ms, default_ttl_ms, dead_letter_on_ttl,
		dlq_max_age_ms, dlq_max_count, dlq_max_bytes, dedup_by_body, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12) ON CONFLICT (name) DO NOTHING`,
		q.Name, driver.Ordering(q.FIFO), q.MaxDeliveryCount, q.LockDurationMS, q.DedupWindowMS,
		q.DefaultTTLMS, q.DeadLetterOnExpire, q.DLQMaxAgeMS, q.DLQMaxCount, q.DLQMaxBytes, q.DedupByBody, now)
	if uniqueViolation(err) {
		return fmt.Errorf("%w: %q", errs.ErrQueueExists, q.Name)
	}
	if err != nil {
		return fmt.Errorf("create queue: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q", errs.ErrQueueExists, q.Name)
	}
	reporterOf(tx).queue(q.Name, true)
	return nil
}

// UpdateQueue replaces the settings of an existing queue. Its ordering can
// not change while it holds messages, since the order already promised to
// grouped messages would silently change: a change of ordering locks the
// queue's row first (FOR UPDATE, which a send's foreign-key check waits
// for), so that no other process adds a message between the count and
// the update.
func (PostgreSQL) UpdateQueue(ctx context.Context, db driver.DBTX, q driver.Queue, now int64) error {
	return inTx(ctx, db, func(tx driver.DBTX) error {
		cur, err := getQueue(ctx, tx, q.Name, "")
		if err != nil {
			return err
		}
		if cur.FIFO != q.FIFO {
			if _, err := getQueue(ctx, tx, q.Name, " FOR UPDATE"); err != nil {
				return err
			}
			// Any message but a completed one (settled_at is set exactly
			// on those: the layout's CHECK).
			var held bool
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM mqlite_messages
				WHERE queue = $1 AND settled_at IS NULL)`, q.Name).Scan(&held); err != nil {
				return fmt.Errorf("update queue: %w", err)
			}
			if held {
				return errs.Invalidf(errs.ErrInvalidOrdering, "ordering of a queue that holds messages cannot change")
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE mqlite_queues SET ordering = $1, max_delivery_count = $2,
			lock_duration_ms = $3, dedup_window_ms = $4, default_ttl_ms = $5, dead_letter_on_ttl = $6,
			dlq_max_age_ms = $7, dlq_max_count = $8, dlq_max_bytes = $9, dedup_by_body = $10, updated_at = $11
			WHERE name = $12`,
			driver.Ordering(q.FIFO), q.MaxDeliveryCount, q.LockDurationMS, q.DedupWindowMS, q.DefaultTTLMS,
			q.DeadLetterOnExpire, q.DLQMaxAgeMS, q.DLQMaxCount, q.DLQMaxBytes, q.DedupByBody, now, q.Name)
		if err != nil {
			return fmt.Errorf("update queue: %w", err)
		}
		return nil
	})
}

// SetPaused pauses the queue at at (epoch ms), or resumes it for at = 0.
// Pausing a paused queue keeps the moment it was first paused (one
// statement: two processes pausing at once keep the first's moment). A
// missing queue is errs.ErrQueueNotFound.
func (PostgreSQL) SetPaused(ctx context.Context, db driver.DBTX, name string, at int64) error {
	res, err := db.ExecContext(ctx, `UPDATE mqlite_queues
		SET paused_at = CASE WHEN $2::bigint = 0 THEN 0 WHEN paused_at = 0 THEN $2::bigint ELSE paused_at END
		WHERE name = $1`, name, at)
	if err != nil {
		return fmt.Errorf("pause queue: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q", errs.ErrQueueNotFound, name)
	}
	return nil
}

// DeleteQueue removes a queue with all its messages, dedup rows, receipts
// and attempts, and its subscription to a topic if it has one. It locks
// the queue's row first (FOR UPDATE): a send in another process waits in
// its foreign-key check and then finds no queue, so no message outlives
// its queue; two deletes of one queue find it once.
func (PostgreSQL) DeleteQueue(ctx context.Context, db driver.DBTX, name string) error {
	return inTx(ctx, db, func(tx driver.DBTX) error { return deleteQueue(ctx, tx, name) })
}

// deleteQueue is DeleteQueue in tx.
func deleteQueue(ctx context.Context, tx driver.DBTX, name string) error {
	if _, err := getQueue(ctx, tx, name, " FOR UPDATE"); err != nil {
		return err
	}
	if _, err := movedRows(ctx, tx, `DELETE FROM mqlite_messages WHERE queue = $1`+gone, name); err != nil {
		return fmt.Errorf("delete queue: %w", err)
	}
	for _, stmt := range []string{
		`DELETE FROM mqlite_dedup WHERE queue = $1`,
		`DELETE FROM mqlite_settlement_receipts WHERE queue = $1`,
		`DELETE FROM mqlite_receive_attempts WHERE queue = $1`,
		`DELETE FROM mqlite_subscriptions WHERE queue = $1`,
		`DELETE FROM mqlite_queues WHERE name = $1`,
		`DELETE FROM mqlite_names WHERE name = $1 AND kind = 'queue'`,
	} {
		if _, err := tx.ExecContext(ctx, stmt, name); err != nil {
			return fmt.Errorf("delete queue: %w", err)
		}
	}
	reporterOf(tx).queue(name, false)
	return nil
}

// GetQueue reads one queue; a missing one is errs.ErrQueueNotFound.
func (PostgreSQL) GetQueue(ctx context.Context, db driver.DBTX, name string) (driver.Queue, error) {
	return getQueue(ctx, db, name, "")
}

// getQueue reads the queue name, with lock (" FOR UPDATE" or "") taken on
// its row.
func getQueue(ctx context.Context, db driver.DBTX, name, lock string) (driver.Queue, error) {
	q, err := driver.ScanQueue(db.QueryRowContext(ctx, `SELECT `+queueColumns+` FROM mqlite_queues WHERE name = $1`+lock, name))
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Queue{}, fmt.Errorf("%w: %q", errs.ErrQueueNotFound, name)
	}
	if err != nil {
		return driver.Queue{}, fmt.Errorf("get queue: %w", err)
	}
	return q, nil
}

// ListQueues returns every queue in name order.
func (PostgreSQL) ListQueues(ctx context.Context, db driver.DBTX) ([]driver.Queue, error) {
	rows, err := db.QueryContext(ctx, `SELECT `+queueColumns+` FROM mqlite_queues ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return driver.ReadQueues(rows)
}
