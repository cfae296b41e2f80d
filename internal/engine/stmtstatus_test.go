package engine_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unsafe"

	sqlite3 "modernc.org/sqlite/lib"
)

// stmtStat is what SQLite counts of one prepared statement of a
// connection (sqlite3_stmt_status): how many times it ran and how many
// times SQLite prepared it again before a run.
type stmtStat struct {
	sql        string
	runs       int32 // SQLITE_STMTSTATUS_RUN
	reprepares int32 // SQLITE_STMTSTATUS_REPREPARE
}

// stmtKey tells two live statements apart: a finalized statement's memory
// may hold a new one, with other text.
type stmtKey struct {
	p   uintptr
	sql string
}

// sqliteHandle calls SQLite on one connection's sqlite3 handle, with the
// connection's own thread-local state (modernc.org/sqlite's libc.TLS).
type sqliteHandle struct {
	next   func(pStmt uintptr) uintptr         // sqlite3_next_stmt
	text   func(pStmt uintptr) string          // sqlite3_sql
	status func(pStmt uintptr, op int32) int32 // sqlite3_stmt_status, not reset
}

// stmtStats returns the counts of every statement prepared on db's
// connection (the store's only one), walked with sqlite3_next_stmt: the
// statements the engine's cache keeps, and whatever else is prepared on
// the connection at the moment (a statement already finalized is gone).
// It reaches the SQLite handle through the driver connection
// (database/sql's Conn.Raw, the engine's cachingConn.Unwrap, then the
// fields db and tls of modernc.org/sqlite's conn) and fails the test,
// naming what it missed, when any of those changed shape.
func stmtStats(t testing.TB, db *sql.DB) map[stmtKey]stmtStat {
	t.Helper()
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("statement counts: %v", err)
	}
	defer c.Close()
	out := map[stmtKey]stmtStat{}
	if err := c.Raw(func(dc any) error {
		u, ok := dc.(interface{ Unwrap() driver.Conn })
		if !ok {
			return fmt.Errorf("the store's driver connection %T has no Unwrap() driver.Conn (engine's cachingConn)", dc)
		}
		h, err := handleOf(u.Unwrap())
		if err != nil {
			return err
		}
		for p := h.next(0); p != 0; p = h.next(p) {
			s := stmtStat{sql: h.text(p), runs: h.status(p, sqlite3.SQLITE_STMTSTATUS_RUN),
				reprepares: h.status(p, sqlite3.SQLITE_STMTSTATUS_REPREPARE)}
			out[stmtKey{p, s.sql}] = s
		}
		return nil
	}); err != nil {
		t.Fatalf("statement counts: %v", err)
	}
	return out
}

// handleOf reads the sqlite3 handle and the libc.TLS out of a
// modernc.org/sqlite connection (its unexported fields db and tls), checking
// their types against the library's functions: a change of modernc's conn
// is an error that says what to update, never a silent zero.
func handleOf(conn driver.Conn) (sqliteHandle, error) {
	v := reflect.ValueOf(conn)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return sqliteHandle{}, fmt.Errorf("the SQLite connection %T is not a pointer to modernc.org/sqlite's conn struct: update stmtstatus_test.go", conn)
	}
	s := v.Elem()
	db := s.FieldByName("db")
	if !db.IsValid() || db.Kind() != reflect.Uintptr {
		return sqliteHandle{}, fmt.Errorf("modernc.org/sqlite's %T has no field db uintptr (the sqlite3 handle): update stmtstatus_test.go", conn)
	}
	tlsType := reflect.TypeOf(sqlite3.Xsqlite3_stmt_status).In(0)
	tls := s.FieldByName("tls")
	if !tls.IsValid() || tls.Type() != tlsType {
		return sqliteHandle{}, fmt.Errorf("modernc.org/sqlite's %T has no field tls %v: update stmtstatus_test.go", conn, tlsType)
	}
	if db.Uint() == 0 || tls.IsNil() {
		return sqliteHandle{}, fmt.Errorf("modernc.org/sqlite's %T is closed (db %#x, tls nil: %v)", conn, db.Uint(), tls.IsNil())
	}
	// The field is unexported: read it through its address to use it.
	tlsValue := reflect.NewAt(tls.Type(), unsafe.Pointer(tls.UnsafeAddr())).Elem().Interface()
	return bindHandle(tlsValue, uintptr(db.Uint()),
		sqlite3.Xsqlite3_next_stmt, sqlite3.Xsqlite3_sql, sqlite3.Xsqlite3_stmt_status)
}

// bindHandle binds SQLite's functions to one connection; T is libc's *TLS,
// inferred from the functions, so that the test needs no import of libc.
func bindHandle[T any](tlsValue any, db uintptr,
	next func(T, uintptr, uintptr) uintptr,
	text func(T, uintptr) uintptr,
	status func(T, uintptr, int32, int32) int32,
) (sqliteHandle, error) {
	tls, ok := tlsValue.(T)
	if !ok {
		return sqliteHandle{}, fmt.Errorf("modernc.org/sqlite's tls is %T, its functions take %v", tlsValue, reflect.TypeFor[T]())
	}
	return sqliteHandle{
		next:   func(p uintptr) uintptr { return next(tls, db, p) },
		text:   func(p uintptr) string { return cString(text(tls, p)) },
		status: func(p uintptr, op int32) int32 { return status(tls, p, op, 0) },
	}, nil
}

// cString copies the NUL-terminated string at p, in SQLite's memory (which
// modernc.org/libc allocates outside Go's heap).
func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	var b strings.Builder
	for at := unsafe.Add(unsafe.Pointer(nil), p); ; at = unsafe.Add(at, 1) {
		c := *(*byte)(at)
		if c == 0 {
			return b.String()
		}
		b.WriteByte(c)
	}
}

// stmtDelta is what one statement did between two walks.
type stmtDelta struct {
	sql        string
	runs       int32
	reprepares int32
	fresh      bool // prepared between the walks
}

// deltas returns the statements that ran between the walks before and
// after, in SQL order.
func deltas(before, after map[stmtKey]stmtStat) []stmtDelta {
	var out []stmtDelta
	for k, a := range after {
		d := stmtDelta{sql: a.sql, runs: a.runs, reprepares: a.reprepares, fresh: true}
		if b, ok := before[k]; ok && b.runs <= a.runs && b.reprepares <= a.reprepares {
			d.runs, d.reprepares, d.fresh = a.runs-b.runs, a.reprepares-b.reprepares, false
		}
		if d.runs > 0 || d.reprepares > 0 {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].sql < out[j].sql })
	return out
}

// oneLine is a statement's text on one line, shortened, for a message.
func oneLine(query string) string {
	s := strings.Join(strings.Fields(query), " ")
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}
