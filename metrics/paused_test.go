package metrics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/metrics"
)

// TestPausedGaugeFollowsPauseAndResume: mqlite_queue_paused is 1 while a
// queue is paused and 0 otherwise, after every pause and resume (a second
// pause or resume changes nothing), for a queue created by this store and
// for one it found paused in the file when it opened, and a queue deleted
// while paused starts again at 0. The other queue stays 0 throughout.
func TestPausedGaugeFollowsPauseAndResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	tb.Queue(t, "other", mqlite.QueueOptions{})
	gauge := func(t *testing.T, st *mqlite.Store, want int) {
		t.Helper()
		exp := fmt.Sprintf(`
# HELP mqlite_queue_paused 1 while the queue is paused (receives claim nothing), else 0.
# TYPE mqlite_queue_paused gauge
mqlite_queue_paused{queue="other"} 0
mqlite_queue_paused{queue="q"} %d
`, want)
		if err := testutil.CollectAndCompare(metrics.NewCollector(st, nil), strings.NewReader(exp), metrics.NamePaused); err != nil {
			t.Fatal(err)
		}
	}
	gauge(t, tb.Store, 0)
	for _, step := range []struct {
		pause bool
		want  int
	}{{true, 1}, {true, 1}, {false, 0}, {false, 0}, {true, 1}} {
		set := tb.Store.ResumeQueue
		if step.pause {
			set = tb.Store.PauseQueue
		}
		if err := set(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		gauge(t, tb.Store, step.want)
	}
	// A store that opens the file finds the queue paused, and follows a
	// resume.
	if err := tb.Store.Close(); err != nil {
		t.Fatal(err)
	}
	again := testdb.OpenPath(t, tb.Path, mqlite.Config{})
	gauge(t, again.Store, 1)
	if err := again.Store.ResumeQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	gauge(t, again.Store, 0)
	// A queue deleted while paused and created again runs.
	if err := again.Store.PauseQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if err := again.Store.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	again.Queue(t, "q", mqlite.QueueOptions{})
	gauge(t, again.Store, 0)
}
