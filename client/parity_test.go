package client_test

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/client"
)

// storeOnly are the exported methods of *mqlite.Store that *client.Client
// does not offer, each with the reason. docs/api-reference-broker.md ("The
// Go client and the store") keeps the same list.
var storeOnly = map[string]string{
	"DB":           "the file's *sql.DB: a client has no file",
	"Tx":           "a transaction on the file, for outbox.SendOne beside the application's own writes: over HTTP each send is its own transaction",
	"TxAndReceive": "Tx that also claims: as Tx",
	"Path":         "the file's path: a client has no file",
	"Migration":    "what Open did to the file's layout: the broker's business",
	"Metrics":      "the gauges of every queue for a Prometheus collector: the broker serves them at /metrics",
	"Ages":         "the oldest ages of every queue for the same collector: the broker serves them at /metrics and in Counts",
	"Receivers":    "the live receivers of every queue, kept in the process's memory: over the broker, each queue's Stats carries its receivers",
}

// clientOnly are the exported methods of *client.Client that *mqlite.Store
// does not offer, each with the reason.
var clientOnly = map[string]string{
	"Send":       "a send in its own transaction: on a store, outbox.Send",
	"SendBatch":  "as Send: on a store, outbox.Send",
	"Counts":     "the broker's per-queue counts for the dashboard (GET /v1/counts): on a store, Metrics",
	"Ready":      "whether the broker is ready (GET /readyz): a store is ready once Open returns",
	"WhoAmI":     "the key the client holds and what it covers: a store has no keys",
	"CreateKey":  "the broker's access keys: on a store, package internal/keys (the CLI's keys command)",
	"ListKeys":   "as CreateKey",
	"RevokeKey":  "as CreateKey",
	"OpenStream": "a stream of messages with a prefetch window, to save round trips over the network: a Loop on a store claims in the process, with no round trip to save",
	"Stream":     "as OpenStream",
	"Commit":     "completions, rejects and sends in one transaction on the broker, replayed by the batch's idempotency key: on a store, Store.Tx with consumer.CompleteTx, RejectTx and outbox.SendBatch",
	"CommitTx":   "as Commit, for consumer.LoopTx and consumer.CompleteWith over the broker (consumer.Committer)",
	"InsertJobs": "typed jobs in one transaction on the broker, unique ones checked in it (jobs.Inserter, for jobs.InsertVia): on a store, jobs.Insert in the caller's transaction",
}

// TestStoreAndClientOfferTheSameOperations: every exported method of
// *mqlite.Store is on *client.Client with the same signature, and the other
// way round, but for the deliberate differences listed above (each of
// which must still exist).
func TestStoreAndClientOfferTheSameOperations(t *testing.T) {
	t.Parallel()
	store := methods(reflect.TypeFor[*mqlite.Store]())
	cl := methods(reflect.TypeFor[*client.Client]())
	for _, side := range []struct {
		name        string
		have, other map[string]reflect.Type
		only        map[string]string
	}{
		{"*mqlite.Store", store, cl, storeOnly},
		{"*client.Client", cl, store, clientOnly},
	} {
		for _, name := range slices.Sorted(maps.Keys(side.have)) {
			_, listed := side.only[name]
			ot, both := side.other[name]
			switch {
			case both && listed:
				t.Errorf("%s.%s is listed as %s's only, but both have it: drop it from the list", side.name, name, side.name)
			case !both && !listed:
				t.Errorf("%s.%s has no counterpart: add it to the other side, or to the list of deliberate differences (with the reason) here and in docs/api-reference-broker.md", side.name, name)
			case both && ot != side.have[name]:
				t.Errorf("%s.%s is %v, but the other side's is %v", side.name, name, side.have[name], ot)
			}
		}
		for name := range side.only {
			if _, ok := side.have[name]; !ok {
				t.Errorf("%s.%s is listed as a deliberate difference but does not exist", side.name, name)
			}
		}
	}
}

// methods returns the exported methods of t by name, each as a function
// type without its receiver.
func methods(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for m := range t.Methods() {
		in := make([]reflect.Type, 0, m.Type.NumIn()-1)
		for i := 1; i < m.Type.NumIn(); i++ {
			in = append(in, m.Type.In(i))
		}
		outs := make([]reflect.Type, m.Type.NumOut())
		for i := range outs {
			outs[i] = m.Type.Out(i)
		}
		out[m.Name] = reflect.FuncOf(in, outs, m.Type.IsVariadic())
	}
	return out
}
