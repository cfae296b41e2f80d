package engine

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
)

// recorder is a DBTX that keeps the text of every statement run through
// it, for the statements that an operation builds inline.
type recorder struct {
	DBTX
	queries []string
}

func (r *recorder) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r.queries = append(r.queries, query)
	return r.DBTX.ExecContext(ctx, query, args...)
}

func (r *recorder) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	r.queries = append(r.queries, query)
	return r.DBTX.QueryContext(ctx, query, args...)
}

func (r *recorder) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	r.queries = append(r.queries, query)
	return r.DBTX.QueryRowContext(ctx, query, args...)
}

// firstStatement runs op on a recorder over db and returns the first
// statement it ran.
func firstStatement(t *testing.T, db DBTX, op func(DBTX)) string {
	t.Helper()
	r := &recorder{DBTX: db}
	op(r)
	if len(r.queries) == 0 {
		t.Fatal("the operation ran no statement")
	}
	return r.queries[0]
}

// paramCount is how many arguments query takes: its highest ?N, and one
// per anonymous ? (SQLite numbers those after the highest ?N before them).
func paramCount(query string) int {
	most, bare := 0, 0
	for i := 0; i < len(query); i++ {
		if query[i] != '?' {
			continue
		}
		j := i + 1
		for j < len(query) && query[j] >= '0' && query[j] <= '9' {
			j++
		}
		if j == i+1 {
			bare++
			continue
		}
		n, _ := strconv.Atoi(query[i+1 : j])
		most = max(most, n)
		i = j - 1
	}
	return most + bare
}

// ephemeralOpens counts the temporary b-trees (OP_OpenEphemeral) in the
// program of query.
func ephemeralOpens(t *testing.T, db DBTX, query string) int {
	t.Helper()
	args := make([]any, paramCount(query))
	rows, err := db.QueryContext(context.Background(), "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, query)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("explain: %v", err)
		}
		if op, _ := vals[1].(string); op == "OpenEphemeral" {
			n++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("explain: %v", err)
	}
	return n
}

// The temporary b-trees a statement's own shape opens, one each.
const (
	ephReturning = 1 // RETURNING gathers its rows before it hands them out
	ephInSelect  = 1 // the rows of an IN (SELECT ...)
	ephManyRows  = 1 // an UPDATE that may change many rows gathers their rowids first
	ephRejoin    = 1 // mqlite_group_move's rejoin UPDATE, of many rows, in every UPDATE of state
	ephWindow    = 1 // the byte budget's window
)

// TestHotStatementsOpenNoTemporaryTables pins how many temporary b-trees
// (OP_OpenEphemeral, in the statement's program and its triggers') each
// statement of a send, claim, settlement, renewal and sweep opens: no more
// than its own shape needs. A constant IN list of three values or more,
// in a CHECK, a partial index's WHERE or a trigger's WHEN that the
// statement evaluates, or in the statement, adds one, built again at every
// execution (about 3 µs each): on layout mqlite-schema-8 a completion
// opened 5, a claim of one message 6, a send 3.
func TestHotStatementsOpenNoTemporaryTables(t *testing.T) {
	t.Parallel()
	db := planDB(t)
	ctx := context.Background()
	renew := firstStatement(t, db, func(db DBTX) {
		_, _ = Renew(ctx, db, RenewRequest{Queue: "q", Seq: 1, Token: "t", Now: 1})
	})
	claimDeferred := firstStatement(t, db, func(db DBTX) {
		_, _ = ClaimDeferred(ctx, db, Queue{Name: "q", MaxDeliveryCount: 10, LockDurationMS: 1}, 1, 1)
	})
	for _, tc := range []struct {
		name  string
		query string
		want  int
	}{
		{"send one", insertMessage, 0},
		{"send one's dedup row", insertDedup, 0},
		{"send a chunk", chunkSQLs[4][0], 0},
		{"look up a chunk's keys", chunkSQLs[4][1], 0},
		{"claim one", claimOneSQL, ephReturning + ephRejoin},
		{"claim", claimSQL, ephReturning + ephInSelect + ephManyRows + ephRejoin},
		{"claim and delete", claimDeleteSQL, ephReturning + ephInSelect},
		{"claim within a budget", claimBudgetSQL, ephReturning + ephInSelect + ephManyRows + ephWindow + ephRejoin},
		{"claim and delete within a budget", claimDeleteBudgetSQL, ephReturning + ephInSelect + ephWindow},
		{"claim deferred", claimDeferred, ephReturning + ephRejoin},
		{"complete", settleSQL[OpComplete], ephRejoin},
		{"abandon", settleSQL[OpAbandon], ephRejoin},
		{"reject", settleSQL[OpReject], ephRejoin},
		{"defer", settleSQL[OpDefer], ephRejoin},
		{"release", settleSQL[OpRelease], ephRejoin},
		{"complete many", completeSQLs[4][0], ephReturning + ephInSelect + ephManyRows + ephRejoin},
		{"complete many in bulk", completeSQLs[4][1], ephReturning + ephInSelect},
		{"renew", renew, ephReturning},
		{"reap expired", reapExpiredSQL, ephManyRows + ephRejoin},
		{"reap all", reapAllSQL, ephInSelect + ephManyRows + ephRejoin},
		{"recover", recoverSQL, ephManyRows + ephRejoin},
		{"promote due", promoteDueSQL, ephManyRows + ephRejoin},
		{"promote all", promoteAllSQL, ephInSelect + ephManyRows + ephRejoin},
		{"expire delete", expireDeleteSQL, ephInSelect},
		{"expire dead-letter", expireDeadLetterSQL, ephInSelect + ephManyRows + ephRejoin},
		{"janitor completed rows", compactSQL[1], ephInSelect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ephemeralOpens(t, db, tc.query); got != tc.want {
				t.Errorf("%d temporary b-trees, want %d:\n%s", got, tc.want, strings.TrimSpace(tc.query))
			}
		})
	}
}
