package driver

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// The readers of the administration rows, shared by the engines: each
// engine writes its own statements and hands the rows here, selected in
// the order each reader names.

// Ordering is the value of the queues table's ordering column for fifo.
func Ordering(fifo bool) string {
	if fifo {
		return "fifo"
	}
	return "standard"
}

// ScanQueue reads a queue selected as name, ordering = 'fifo',
// max_delivery_count, lock_duration_ms, dedup_window_ms, default_ttl_ms,
// dead_letter_on_ttl, dlq_max_age_ms, dlq_max_count, dlq_max_bytes,
// dedup_by_body, created_at, updated_at, paused_at.
func ScanQueue(s Scanner) (Queue, error) {
	var q Queue
	err := s.Scan(&q.Name, &q.FIFO, &q.MaxDeliveryCount, &q.LockDurationMS, &q.DedupWindowMS,
		&q.DefaultTTLMS, &q.DeadLetterOnExpire, &q.DLQMaxAgeMS, &q.DLQMaxCount, &q.DLQMaxBytes,
		&q.DedupByBody, &q.CreatedAt, &q.UpdatedAt, &q.PausedAt)
	return q, err
}

// ReadQueues reads every queue of rows (ScanQueue's columns) and closes
// them.
func ReadQueues(rows *sql.Rows) ([]Queue, error) {
	defer rows.Close()
	var out []Queue
	for rows.Next() {
		q, err := ScanQueue(rows)
		if err != nil {
			return nil, fmt.Errorf("list queues: %w", err)
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// ReadTopics reads every topic of rows, selected as name, created_at, and
// closes them; then it reads each one's subscriptions with subs (once the
// rows are closed: a transaction runs one statement at a time).
func ReadTopics(rows *sql.Rows, subs func(topic string) ([]Subscription, error)) ([]Topic, error) {
	var out []Topic
	for rows.Next() {
		var t Topic
		if err := rows.Scan(&t.Name, &t.CreatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list topics: %w", err)
		}
		out = append(out, t)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	for i := range out {
		var err error
		if out[i].Subscriptions, err = subs(out[i].Name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReadSubscriptions reads the subscriptions of topic in rows, selected as
// queue, filter (its JSON), created_at, and closes them.
func ReadSubscriptions(rows *sql.Rows, topic string) ([]Subscription, error) {
	defer rows.Close()
	var out []Subscription
	for rows.Next() {
		sub := Subscription{Topic: topic}
		var filter string
		if err := rows.Scan(&sub.Queue, &filter, &sub.CreatedAt); err != nil {
			return nil, fmt.Errorf("subscriptions of %s: %w", topic, err)
		}
		if err := json.Unmarshal([]byte(filter), &sub.Filter); err != nil {
			return nil, fmt.Errorf("subscription %s/%s: filter: %w", topic, sub.Queue, err)
		}
		out = append(out, sub)
	}
	return out, rows.Err()
}

// ScanSchedule reads a schedule selected as name, target, cron,
// time_zone, interval_ms, anchor_at, catch_up, body, group_id, subject,
// properties, ttl_ms, next_at, last_at, last_error, fired, skipped,
// created_at, updated_at. An empty body reads as empty, never nil.
func ScanSchedule(s Scanner) (Schedule, error) {
	var r Schedule
	err := s.Scan(&r.Name, &r.Target, &r.Cron, &r.TimeZone, &r.IntervalMS, &r.AnchorAt, &r.CatchUp, &r.Body,
		&r.GroupID, &r.Subject, &r.Properties, &r.TTLMS, &r.NextAt, &r.LastAt, &r.LastError, &r.Fired,
		&r.Skipped, &r.CreatedAt, &r.UpdatedAt)
	if r.Body == nil {
		r.Body = []byte{}
	}
	return r, err
}

// ReadSchedules reads the schedules of rows (ScanSchedule's columns),
// stopping before their sizes add up past maxBytes when it is positive
// (the first is always kept), and closes them.
func ReadSchedules(rows *sql.Rows, maxBytes int64) ([]Schedule, error) {
	defer rows.Close()
	var out []Schedule
	var total int64
	for rows.Next() {
		r, err := ScanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		if total += r.Size(); maxBytes > 0 && total > maxBytes && len(out) > 0 {
			break
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// SchedulePageEnd reads rows of name, size (Schedule.Size) in name order
// and returns the name of the last that fits a page of maxBytes (the first
// whatever its size); "" when rows has none. It closes rows.
func SchedulePageEnd(rows *sql.Rows, maxBytes int64) (string, error) {
	defer rows.Close()
	var last string
	var total int64
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			return "", fmt.Errorf("list schedules: %w", err)
		}
		if total += size; total > maxBytes && last != "" {
			break
		}
		last = name
	}
	return last, rows.Err()
}
