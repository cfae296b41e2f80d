package engine

import (
	"context"
	"database/sql"
	"testing"
)

// chunkSizer is a DBTX that, before each chunk's DELETE of the dedup walk,
// reads how many rows and bytes (dedupRowBytes) the chunk spans.
type chunkSizer struct {
	DBTX
	t      *testing.T
	chunks []struct{ rows, bytes int64 }
}

func (c *chunkSizer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if query == dedupExpireSQL {
		var rows, bytes int64
		if err := c.DBTX.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(`+dedupRowBytes+`), 0) FROM mqlite_dedup
			WHERE (queue, key) >= (?1, ?2) AND (queue, key) < (?3, ?4)`, args[1:]...).Scan(&rows, &bytes); err != nil {
			c.t.Fatal(err)
		}
		c.chunks = append(c.chunks, struct{ rows, bytes int64 }{rows, bytes})
	}
	return c.DBTX.ExecContext(ctx, query, args...)
}

// TestDedupWalkBoundedByPages checks that every statement of the janitor's
// walk over the dedup keys spans at most dedupChunkBytes of rows (about 32
// leaf pages) and at most SweepBatch keys, whatever the keys' length: with
// chunks bounded by the count alone, 500 MessageIDs of 250 bytes spanned
// about 140 pages in one statement.
func TestDedupWalkBoundedByPages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		key     string // SQL for the i-th key
		keys    int64
		atLeast int // chunks the walk must take
	}{
		{"long MessageIDs", `printf('%0250d', i)`, 1000, 8},
		{"content keys", `randomblob(16)`, 3000, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := planDB(t)
			ctx := context.Background()
			if _, err := db.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
				INSERT INTO mqlite_dedup (queue, key, seq, expires_at) SELECT 'q', `+tc.key+`, i, 10 FROM n`, tc.keys); err != nil {
				t.Fatal(err)
			}
			sizer := &chunkSizer{DBTX: db, t: t}
			n, err := expireDedup(ctx, sizer, 20, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.keys {
				t.Fatalf("the walk deleted %d keys, want %d", n, tc.keys)
			}
			if len(sizer.chunks) < tc.atLeast {
				t.Fatalf("%d chunks before the last, want at least %d", len(sizer.chunks), tc.atLeast)
			}
			for i, c := range sizer.chunks {
				if c.rows > SweepBatch || c.rows > 1 && c.bytes > dedupChunkBytes {
					t.Errorf("chunk %d spans %d keys of %d bytes: over %d keys or %d bytes", i, c.rows, c.bytes, SweepBatch, dedupChunkBytes)
				}
			}
		})
	}
}
