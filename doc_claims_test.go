package mqlite_test

import (
	"context"
	"go/parser"
	"go/token"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// TestBodyDedupIsOptIn: on a queue with the default options, the same body
// sent twice without a MessageID is two messages; with DedupByBody, one.
// The package doc says so: it names DedupByBody where it speaks of bodies.
func TestBodyDedupIsOptIn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, t.TempDir()+"/app.db", mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, tc := range []struct {
		queue string
		opts  mqlite.QueueOptions
		want  int64
	}{{"plain", mqlite.QueueOptions{}, 2}, {"bybody", mqlite.QueueOptions{DedupByBody: true}, 1}} {
		if err := st.CreateQueue(ctx, tc.queue, tc.opts); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := outbox.Send(ctx, st, tc.queue, outbox.Message{Body: []byte("same")}); err != nil {
				t.Fatal(err)
			}
		}
		s, err := st.Stats(ctx, tc.queue)
		if err != nil {
			t.Fatal(err)
		}
		if s.Active != tc.want {
			t.Errorf("%s: %d messages, want %d", tc.queue, s.Active, tc.want)
		}
	}
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(f.Doc.Text()), " ")
	if strings.Contains(doc, "same body") && !strings.Contains(doc, "DedupByBody") {
		t.Error("the package doc speaks of deduplicating the same body without naming QueueOptions.DedupByBody (off by default)")
	}
}
