package keys_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

func TestCreateAuthenticateRevoke(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	k, secret, err := keys.Create(ctx, b.Store, keys.Scope{Role: keys.Consumer, Queues: []string{"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "mqlite_"+k.ID+"_") || len(secret) != len("mqlite_")+16+1+43 {
		t.Fatalf("secret %q for id %s", secret, k.ID)
	}
	// Only a hash is stored: the secret's text is nowhere in the table.
	if n := testdb.Int(t, b.Store.DB(), `SELECT count(*) FROM mqlite_access_keys WHERE instr(secret_hash, ?) > 0 OR instr(scopes, ?) > 0`,
		secret[len(secret)-43:], secret[len(secret)-43:]); n != 0 {
		t.Fatal("the secret is stored in clear")
	}
	got, err := keys.Authenticate(ctx, b.Store, secret)
	if err != nil || got.ID != k.ID || got.Scope.Role != keys.Consumer || !got.Scope.HasQueue("orders") || got.Scope.HasQueue("other") {
		t.Fatalf("authenticate: %+v, %v", got, err)
	}
	for _, bad := range []string{
		"", "mqlite_", secret[:len(secret)-1], secret + "x", "mqlite_" + k.ID + "_" + strings.Repeat("A", 43),
		strings.Replace(secret, "mqlite_", "mqlitf_", 1), "mqlite_zzzzzzzzzzzzzzzz_" + strings.Repeat("A", 43),
	} {
		if _, err := keys.Authenticate(ctx, b.Store, bad); !errors.Is(err, keys.ErrUnauthorized) {
			t.Errorf("Authenticate(%q): %v, want ErrUnauthorized", bad, err)
		}
	}
	if err := keys.Revoke(ctx, b.Store, k.ID); err != nil {
		t.Fatal(err)
	}
	if err := keys.Revoke(ctx, b.Store, k.ID); err != nil {
		t.Fatalf("second revoke: %v", err)
	}
	if _, err := keys.Authenticate(ctx, b.Store, secret); !errors.Is(err, keys.ErrUnauthorized) {
		t.Fatalf("revoked key: %v", err)
	}
	if err := keys.Revoke(ctx, b.Store, "nope"); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	ks, err := keys.List(ctx, b.Store)
	if err != nil || len(ks) != 1 || ks[0].RevokedAt.IsZero() {
		t.Fatalf("list: %+v, %v", ks, err)
	}
}

func TestScope(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		scope keys.Scope
		ok    bool
	}{
		{"admin all", keys.Scope{Role: keys.Admin, Queues: []string{"*"}}, true},
		{"producer one", keys.Scope{Role: keys.Producer, Queues: []string{"q"}}, true},
		{"worker two", keys.Scope{Role: keys.Worker, Queues: []string{"in", "out"}}, true},
		{"unknown role", keys.Scope{Role: "root", Queues: []string{"*"}}, false},
		{"no queue", keys.Scope{Role: keys.Consumer}, false},
		{"empty queue", keys.Scope{Role: keys.Consumer, Queues: []string{""}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.scope.Validate(); (err == nil) != tc.ok || (err != nil && !errors.Is(err, keys.ErrInvalidScope)) {
				t.Fatalf("Validate: %v, want ok=%v", err, tc.ok)
			}
		})
	}
	admin := keys.Scope{Role: keys.Admin, Queues: []string{"a"}}
	if !admin.HasRole(keys.Producer) || !admin.HasRole(keys.Consumer) || admin.AllQueues() {
		t.Error("admin includes every role, and covers only its queues")
	}
	if w := (keys.Scope{Role: keys.Worker, Queues: []string{"in"}}); !w.HasRole(keys.Producer) || !w.HasRole(keys.Consumer) || w.HasRole(keys.Admin) {
		t.Error("worker: producer and consumer, never admin")
	}
	if c := (keys.Scope{Role: keys.Consumer, Queues: []string{"in"}}); c.HasRole(keys.Worker) || c.HasRole(keys.Producer) {
		t.Error("consumer: neither worker nor producer")
	}
	if p := (keys.Scope{Role: keys.Producer, Queues: []string{"*"}}); p.HasRole(keys.Consumer) || !p.HasQueue("x") {
		t.Error("producer: no consumer role; * covers every queue")
	}
}
