package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/mqlite/mqlite/schema"
)

// TestBatchKeepsMessageIDsAndContentKeysApart: within one batch, a slot
// whose MessageID has the very bytes of another slot's content key is not
// its duplicate: the batch's own key map keeps the two kinds apart, as the
// dedup table does.
func TestBatchKeepsMessageIDsAndContentKeysApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, release, err := openDB(ConnConfig{Path: filepath.Join(t.TempDir(), "keys.db"), BusyTimeoutMS: 1000,
		MaxMessageBytes: 1 << 20, Now: func() int64 { return 1 }, Closing: func() bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(); release() })
	if err := schema.Apply(ctx, db); err != nil {
		t.Fatal(err)
	}
	// A body whose content key is valid UTF-8, so that a MessageID can
	// spell it byte for byte (one body in about 2^16).
	var body []byte
	for i := 0; ; i++ {
		body = fmt.Appendf(nil, "body-%d", i)
		if utf8.Valid(contentKey(body)) {
			break
		}
	}
	spelled := SendMessage{Body: []byte("another body"), MessageID: string(contentKey(body))}
	for i, order := range [][]SendMessage{{{Body: body}, spelled}, {spelled, {Body: body}}} {
		q := Queue{Name: fmt.Sprint("q", i), MaxDeliveryCount: 10, LockDurationMS: 30000, DedupWindowMS: 60000, DedupByBody: true}
		if err := CreateQueue(ctx, db, q, 1); err != nil {
			t.Fatal(err)
		}
		res, err := Send(ctx, db, q.Name, order)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Err != nil || r.Duplicate || r.Seq == 0 {
				t.Fatalf("slot %d of %q, %q: %+v, want a new message", i, order[0].MessageID, order[1].MessageID, r)
			}
		}
	}
}
