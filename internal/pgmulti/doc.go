// Package pgmulti holds the multi-process test of a store on PostgreSQL:
// three OS processes (the test binary, re-executed as workers) open one
// database at once and consume it directly, and the harness checks the
// kit's promises across them: FIFO order, one message in flight per
// group, fencing, dedup, one message per schedule period, and wake-ups
// (LISTEN/NOTIFY, and the polling that stands in when the listening
// connection dies). It has no code: the test is the package.
package pgmulti
