package engine

import (
	"context"
	"database/sql"
)

// CompleteManyAs is CompleteMany in the form the benchmark names: "mixed"
// (CompleteMany's own choice), "keep" (the rows kept completed, whatever
// their number) or "delete" (the rows deleted and receipts written).
func CompleteManyAs(ctx context.Context, tx DBTX, locks []Settlement, now int64, form string) ([]error, error) {
	switch form {
	case "keep":
		return completeMany(ctx, tx, locks, now, false)
	case "delete":
		return completeMany(ctx, tx, locks, now, true)
	}
	return CompleteMany(ctx, tx, locks, now)
}

// HotLevers turns the hot path's levers on or off (hot.go): the
// statements through the driver, and BEGIN/COMMIT by slot.
func HotLevers(statements, beginCommit bool) {
	var off uint32
	if !statements {
		off |= hotStatements
	}
	if !beginCommit {
		off |= hotBeginCommit
	}
	hotOff.Store(off)
}

// HotPrepared reports whether the store's connection of db has prepared
// the hot statement of a single send (hot.go): whether a send ran on the
// hot path.
func HotPrepared(ctx context.Context, db *sql.DB) (bool, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	var ok bool
	err = conn.Raw(func(dc any) error {
		c := dc.(*cachingConn)
		c.run.Lock()
		defer c.run.Unlock()
		ok = hotInsertMessage.slot < len(c.hot) && c.hot[hotInsertMessage.slot] != nil
		return nil
	})
	return ok, err
}
