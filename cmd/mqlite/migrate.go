package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/schema"
)

// schemaCmd prints the SQL a store adds to a file, for review before
// anything runs.
func schemaCmd(g *globals) *cobra.Command {
	var engine string
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "print the SQL a store adds to a database (every object named mqlite_...)",
		Long: `schema prints, as one SQL script in one transaction, every table, index and
trigger a store adds to a SQLite file (or, with --engine postgres, to a
PostgreSQL database), and the migrations table that records them. Nothing is
opened or written: read it before a store shares your database, or run it
yourself (sqlite3 app.db < mqlite.sql, psql -f mqlite.sql) and open the store
with Config.ExistingOnly.`,
		Example: `  mqlite schema > mqlite.sql
  mqlite schema --engine postgres > mqlite-postgres.sql`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, sql := schema.Token, schema.SQL()
			switch engine {
			case "sqlite":
			case "postgres":
				token, sql = schema.PostgresToken, schema.PostgresSQL()
			default:
				return usagef("unknown --engine %q: sqlite or postgres", engine)
			}
			if g.json {
				return g.emit(map[string]string{"token": token, "sql": sql}, nil)
			}
			_, err := io.WriteString(g.stdout, sql)
			return err
		},
	}
	cmd.Flags().StringVar(&engine, "engine", "sqlite", "the engine whose SQL to print: sqlite or postgres")
	return cmd
}

// migrateResult is migrate's answer with --json.
type migrateResult struct {
	From    int64 `json:"from"`
	To      int64 `json:"to"`
	Created bool  `json:"created"`
}

// migrateCmd brings a store to this binary's layout, explicitly.
func migrateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "bring the store at --db to this binary's layout (creating it if the file has none)",
		Long: `migrate upgrades the store at --db to the layout of this binary, in one
transaction, and prints what it did: created a new store, migrated from version
N to M, or up to date. A file without a store gets one (an application's own
SQLite file too: the store's objects are all named mqlite_..., see mqlite
schema). The other commands never migrate: they ask for this one.`,
		Example: `  mqlite migrate --db app.db`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.url != "" || g.db == "" {
				return usagef("migrate works on a file: give --db FILE (not --url)")
			}
			m, err := mqlite.Migrate(cmd.Context(), g.db, mqlite.Config{})
			if err != nil {
				return err
			}
			return g.emit(migrateResult{From: m.From, To: m.To, Created: m.Created()}, func(w io.Writer) {
				switch {
				case m.Created():
					fmt.Fprintf(w, "created a new store at %s (version %d)\n", g.where(), m.To)
				case m.From == m.To:
					fmt.Fprintf(w, "the store at %s is up to date (version %d)\n", g.where(), m.To)
				default:
					fmt.Fprintf(w, "migrated the store at %s from version %d to %d\n", g.where(), m.From, m.To)
				}
			})
		},
	}
}
