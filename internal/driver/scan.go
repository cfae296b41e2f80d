package driver

import "database/sql"

// Scanner is a *sql.Row or *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// ScanRow scans a Row from the columns every engine's statements return for
// a message, in this order: id, state, delivery_count, enqueued_at,
// expires_at, visible_at, message_id, group_id (NULL for none), subject,
// properties, body, lock_token, locked_until, dead_letter_reason,
// dead_letter_desc, dead_lettered_at, last_error, priority; each text ""
// for none but group_id.
func ScanRow(s Scanner) (Row, error) {
	var c Row
	var gid sql.NullString
	err := s.Scan(&c.Seq, &c.State, &c.DeliveryCount, &c.EnqueuedAt, &c.ExpiresAt, &c.VisibleAt,
		&c.MessageID, &gid, &c.Subject, &c.Properties, &c.Body, &c.LockToken, &c.LockedUntil,
		&c.DeadLetterReason, &c.DeadLetterDescription, &c.DeadLetteredAt, &c.LastError, &c.Priority)
	if gid.Valid {
		c.GroupID = &gid.String
	}
	return c, err
}
