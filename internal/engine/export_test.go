package engine

import "context"

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
