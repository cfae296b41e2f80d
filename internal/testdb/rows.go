package testdb

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
)

// Rows returns every row of table, each as its values printed one after
// another ("v|v|...|"; a []byte prints as its bytes), in the table's order,
// failing the test on error: what tests compare to show a call wrote
// nothing.
func Rows(t testing.TB, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT * FROM ` + table)
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		var b strings.Builder
		for _, v := range vals {
			fmt.Fprintf(&b, "%v|", v)
		}
		out = append(out, b.String())
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return out
}
