package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultAdminURL is the server the benchmark runs on when -url is not
// given: the shared local PostgreSQL, which trusts the postgres role.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// benchDB is the benchmark's own database on the server: made when the
// run starts and dropped (with whatever is still connected) when it ends.
// Each measurement gets a fresh schema of it, alone on its URL's search
// path, so that every side starts from empty tables and nothing of the
// previous measurement (dead rows, its indexes' bloat) is in the way.
type benchDB struct {
	admin string // the server's admin URL
	name  string // the database
	url   string // the database's URL, without a search path
	n     int    // schemas made so far
	// sync is the synchronous_commit of every connection of the run ("" for
	// the server's own).
	sync string
	// server is the server's version and commit setting, for the table's
	// heading (readServer).
	server string
}

// readServer notes the server's version and synchronous_commit.
func (d *benchDB) readServer(ctx context.Context) error {
	u, err := url.Parse(d.url)
	if err != nil {
		return err
	}
	if d.sync != "" {
		q := u.Query()
		q.Set("synchronous_commit", d.sync)
		u.RawQuery = q.Encode()
	}
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var version, sync string
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit')`).Scan(&version, &sync); err != nil {
		return err
	}
	d.server = "PostgreSQL " + version + ", synchronous_commit " + sync
	return nil
}

// createBenchDB creates a database named mqlite_bench_ and random hex on
// the server at admin.
func createBenchDB(ctx context.Context, admin string) (*benchDB, error) {
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("the server's URL %q is not a postgres:// URL", admin)
	}
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	name := "mqlite_bench_" + hex.EncodeToString(b)
	if err := adminExec(ctx, admin, "CREATE DATABASE "+name+" TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"); err != nil {
		return nil, fmt.Errorf("create database %s on %s: %w", name, u.Redacted(), err)
	}
	u.Path = "/" + name
	return &benchDB{admin: admin, name: name, url: u.String()}, nil
}

// drop drops the database, ending the connections still open to it.
func (d *benchDB) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return adminExec(ctx, d.admin, "DROP DATABASE IF EXISTS "+d.name+" WITH (FORCE)")
}

// schema makes a fresh schema and returns the URL whose connections see it
// alone (search_path) and a function that drops it.
func (d *benchDB) schema(ctx context.Context) (string, func() error, error) {
	d.n++
	name := fmt.Sprintf("s%04d", d.n)
	if err := adminExec(ctx, d.url, "CREATE SCHEMA "+name); err != nil {
		return "", nil, fmt.Errorf("create schema %s: %w", name, err)
	}
	u, err := url.Parse(d.url)
	if err != nil {
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", name)
	if d.sync != "" {
		q.Set("synchronous_commit", d.sync)
	}
	u.RawQuery = q.Encode()
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		return adminExec(ctx, d.url, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	}
	return u.String(), drop, nil
}

// adminExec runs one statement on a connection of its own to url.
func adminExec(ctx context.Context, url, stmt string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, stmt)
	return err
}
