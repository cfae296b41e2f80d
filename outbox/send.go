package outbox

import (
	"context"

	"github.com/mqlite/mqlite"
)

// Send enqueues msgs on queue in a transaction of its own on st, in order,
// and commits it: for a message that has no business rows to commit with
// (a CLI, a broker, a bridge). Its results and errors are SendBatch's; a
// slot whose MessageID conflicts gets its own Err while the others commit.
// Inside the application's own transaction, call SendOne or SendBatch on it
// instead, so the message commits with the rows or not at all.
func Send(ctx context.Context, st *mqlite.Store, queue string, msgs ...Message) ([]Result, error) {
	var res []Result
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		var err error
		res, err = SendBatch(tx.Context(), tx.SQL(), queue, msgs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
