package pgtest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/mqlite/mqlite/internal/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// dial opens a connection to rawURL for a test, closed when t ends.
func dial(t *testing.T, rawURL string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", rawURL, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// databaseExists reports whether database name exists on the shared server.
func databaseExists(t *testing.T, admin *pgx.Conn, name string) bool {
	t.Helper()
	var n int
	err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestURLGivesAnEmptyDatabaseDroppedAfter: URL's database is new, empty
// and the test's, and it is gone once the test has ended, even with a
// session still open on it. The same query that finds it gone finds it
// there while the test runs.
func TestDatabaseIsEmptyAndDroppedAfter(t *testing.T) {
	t.Parallel()
	var name string
	var left *pgx.Conn // a session the subtest leaves open
	t.Run("test", func(t *testing.T) {
		u := pgtest.Database(t)
		conn, err := pgx.Connect(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		left = conn
		ctx := context.Background()
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "mqlite_t_") || !strings.HasSuffix(u, "/"+name+"?sslmode=disable") {
			t.Fatalf("URL %s, database %s: want a database mqlite_t_…, named by the URL", u, name)
		}
		var objects int
		err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'`).Scan(&objects)
		if err != nil {
			t.Fatal(err)
		}
		if objects != 0 {
			t.Fatalf("the fresh database holds %d relations, want none", objects)
		}
		var encoding, collate string
		err = conn.QueryRow(ctx, `SELECT pg_encoding_to_char(encoding), datcollate FROM pg_database
			WHERE datname = current_database()`).Scan(&encoding, &collate)
		if err != nil {
			t.Fatal(err)
		}
		if encoding != "UTF8" || collate != "C" {
			t.Fatalf("encoding %s, collation %s: want UTF8 and C", encoding, collate)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE mqlite_pgtest (id int)"); err != nil {
			t.Fatal(err)
		}
		if !databaseExists(t, dial(t, pgtest.AdminURL()), name) {
			t.Fatalf("database %s is not in pg_database while its test runs", name)
		}
	})
	if name == "" {
		t.Skip("the subtest had no database")
	}
	defer func() { _ = left.Close(context.Background()) }()
	if databaseExists(t, dial(t, pgtest.AdminURL()), name) {
		t.Fatalf("database %s is still there after its test ended", name)
	}
	err := left.Ping(context.Background())
	if err == nil {
		t.Fatal("the session the test left open still answers after its database was dropped")
	}
	t.Logf("database %s: empty while its test ran, dropped after it with a session still open (which then failed: %v)", name, err)
}

// TestURLsAreDistinct: two URLs of one test are two databases, and what
// is written in one is not in the other.
func TestDatabasesAreDistinct(t *testing.T) {
	t.Parallel()
	a, b := pgtest.Database(t), pgtest.Database(t)
	if a == b {
		t.Fatalf("two URLs are the same: %s", a)
	}
	ctx := context.Background()
	ca, cb := dial(t, a), dial(t, b)
	if _, err := ca.Exec(ctx, "CREATE TABLE mqlite_pgtest (id int)"); err != nil {
		t.Fatal(err)
	}
	var inA, inB bool
	const q = "SELECT to_regclass('mqlite_pgtest') IS NOT NULL"
	if err := ca.QueryRow(ctx, q).Scan(&inA); err != nil {
		t.Fatal(err)
	}
	if err := cb.QueryRow(ctx, q).Scan(&inB); err != nil {
		t.Fatal(err)
	}
	if !inA || inB {
		t.Fatalf("table made in %s: seen there %v, seen in %s %v; want true, false", a, inA, b, inB)
	}
}

// running reports whether process pid runs (a zombie does not count: it
// has exited, and only waits to be reaped). It reads /proc, so it skips t
// where there is none.
func running(t *testing.T, pid int) bool {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc, which only Linux has")
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		t.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	state := stat[i+2]
	return state != 'Z' && state != 'X'
}

// recorder is a testing.TB whose Skipf and Fatalf are recorded and end
// the goroutine, as the real ones do, without ending the test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// call calls f with a recorder in a goroutine of its own.
func call(t *testing.T, f func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

// callURL calls pgtest.URL with a recorder.
func callURL(t *testing.T) *recorder {
	return call(t, func(tb testing.TB) { pgtest.Database(tb) })
}

// TestStartClusterWithoutPostgreSQL: with no initdb to be found, neither
// on PATH nor in Debian's folder, StartCluster skips the test and says
// why, and fails it under MQLITE_REQUIRE_SERVICES=1.
func TestStartClusterWithoutPostgreSQL(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := *pgtest.DebianRoot
	*pgtest.DebianRoot = t.TempDir()
	t.Cleanup(func() { *pgtest.DebianRoot = saved })
	start := func(tb testing.TB) { pgtest.StartCluster(tb) }

	t.Setenv("MQLITE_REQUIRE_SERVICES", "")
	r := call(t, start)
	if r.skipped == "" || r.failed != "" || !strings.Contains(r.skipped, "initdb") {
		t.Fatalf("without initdb: skipped %q, failed %q; want a skip naming initdb", r.skipped, r.failed)
	}
	t.Logf("skipped: %s", r.skipped)

	t.Setenv("MQLITE_REQUIRE_SERVICES", "1")
	r = call(t, start)
	if r.failed == "" || r.skipped != "" {
		t.Fatalf("without initdb, required: skipped %q, failed %q; want a failure", r.skipped, r.failed)
	}
	t.Logf("failed: %s", r.failed)
}

// TestURLWithoutServer: with no server at MQLITE_PG_URL, URL skips the
// test and says why, and fails it under MQLITE_REQUIRE_SERVICES=1.
func TestURLWithoutServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens there now
	t.Setenv("MQLITE_PG_URL", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port))

	t.Setenv("MQLITE_REQUIRE_SERVICES", "")
	r := callURL(t)
	if r.skipped == "" || r.failed != "" || !strings.Contains(r.skipped, fmt.Sprint(port)) {
		t.Fatalf("without a server: skipped %q, failed %q; want a skip naming the port %d", r.skipped, r.failed, port)
	}
	t.Logf("skipped: %s", r.skipped)

	t.Setenv("MQLITE_REQUIRE_SERVICES", "1")
	r = callURL(t)
	if r.failed == "" || r.skipped != "" {
		t.Fatalf("without a server, required: skipped %q, failed %q; want a failure", r.skipped, r.failed)
	}
	t.Logf("failed: %s", r.failed)
}

// TestClusterKeepsCommittedRowsAcrossKill: a row committed before the
// server is killed (SIGKILL to the postmaster and its process group) is
// there after the restart, and a row whose transaction was still open is
// not (the control: the kill did cut the server short). A session open
// across the kill fails; a new one works. A clean Restart keeps the row
// too.
func TestClusterKeepsCommittedRowsAcrossKill(t *testing.T) {
	t.Parallel()
	c := pgtest.StartCluster(t)
	ctx := context.Background()
	u, err := url.Parse(c.URL())
	if err != nil || u.Port() != fmt.Sprint(c.Port()) || u.Path != "/"+pgtest.ClusterDatabase {
		t.Fatalf("URL %s (%v): want database %s on port %d", c.URL(), err, pgtest.ClusterDatabase, c.Port())
	}

	conn := dial(t, c.URL())
	if _, err := conn.Exec(ctx, "CREATE TABLE mqlite_pgtest (id int PRIMARY KEY, body text)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO mqlite_pgtest VALUES (1, 'committed')"); err != nil {
		t.Fatal(err)
	}
	open := dial(t, c.URL())
	tx, err := open.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO mqlite_pgtest VALUES (2, 'never committed')"); err != nil {
		t.Fatal(err)
	}

	killed := c.PID()
	if killed == 0 {
		t.Fatal("PID is 0 while the cluster runs")
	}
	backends := []uint32{conn.PgConn().PID(), open.PgConn().PID()}
	for _, b := range backends {
		if !running(t, int(b)) {
			t.Fatalf("backend %d is not seen running before the kill", b)
		}
	}
	c.Kill()
	for _, b := range backends {
		if running(t, int(b)) {
			t.Fatalf("backend %d still runs after Kill returned", b)
		}
	}
	if c.PID() != 0 {
		t.Fatalf("PID is %d after Kill, want 0", c.PID())
	}
	if err := syscall.Kill(killed, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("postmaster %d after Kill: signal 0 gives %v, want ESRCH", killed, err)
	}
	_, errAcross := conn.Exec(ctx, "SELECT 1")
	if errAcross == nil {
		t.Fatal("a session open across the kill still answers")
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if down, err := pgx.Connect(dctx, c.URL()); err == nil {
		_ = down.Close(ctx)
		t.Fatal("a new session connects while the cluster is killed")
	}

	c.Restart()
	restarted := c.PID()
	if restarted == 0 || restarted == killed {
		t.Fatalf("PID after Restart %d (killed %d): want a new postmaster", restarted, killed)
	}
	rows := func(when string) {
		t.Helper()
		fresh := dial(t, c.URL())
		var ids []int
		r, err := fresh.Query(ctx, "SELECT id FROM mqlite_pgtest ORDER BY id")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		for r.Next() {
			var id int
			if err := r.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := r.Err(); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if len(ids) != 1 || ids[0] != 1 {
			t.Fatalf("%s: rows %v, want only the committed one, [1]", when, ids)
		}
	}
	rows("after the kill")
	logged, err := os.ReadFile(c.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logged), "database system was interrupted") {
		t.Fatalf("the server's log says no recovery from the kill:\n%s", logged)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("the session open across the kill answers after the restart")
	}

	c.Restart() // clean: a fast shutdown, then a start
	if c.PID() == restarted {
		t.Fatalf("PID %d unchanged by a clean Restart", restarted)
	}
	rows("after a clean restart")
	logged, err = os.ReadFile(c.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(logged), "database system was shut down at"); n != 2 {
		t.Fatalf("the server's log tells of %d starts after a clean shutdown, want 2 (initdb's, the clean restart's):\n%s", n, logged)
	}
	t.Logf("exercised: cluster on 127.0.0.1:%d; killed postmaster %d (SIGKILL to it and its children) with a row committed and one in an open transaction; "+
		"its backends %v were gone when Kill returned; the session open across it failed (%v); "+
		"restarted as %d, which recovered (its log says so): the committed row kept, the open one gone; "+
		"a clean restart as %d kept it",
		c.Port(), killed, backends, errAcross, restarted, c.PID())
}

// TestURLGivesASchemaOfItsOwn: URL's search path is one new, empty schema
// of the shared database; what a test makes there is invisible from
// another URL, and the schema is dropped, with what it holds, when the
// test ends.
func TestURLGivesASchemaOfItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var schema string
	t.Run("test", func(t *testing.T) {
		a, b := pgtest.URL(t), pgtest.URL(t)
		ca, cb := dial(t, a), dial(t, b)
		if err := ca.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(schema, "mqlite_t_") {
			t.Fatalf("current schema %q: want mqlite_t_…", schema)
		}
		if _, err := ca.Exec(ctx, "CREATE TABLE mqlite_pgtest (id int)"); err != nil {
			t.Fatal(err)
		}
		var inB bool
		if err := cb.QueryRow(ctx, "SELECT to_regclass('mqlite_pgtest') IS NOT NULL").Scan(&inB); err != nil {
			t.Fatal(err)
		}
		if inB {
			t.Fatal("a table made on one URL is visible on another")
		}
	})
	if schema == "" {
		t.Skip("the subtest had no schema")
	}
	u, _ := url.Parse(pgtest.AdminURL())
	u.Path = "/" + pgtest.SharedDatabase
	var left bool
	if err := dial(t, u.String()).QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left {
		t.Fatalf("schema %s is still there after its test ended", schema)
	}
	t.Logf("schema %s: alone on its URL's search path, dropped after its test", schema)
}
