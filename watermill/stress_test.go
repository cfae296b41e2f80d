//go:build stress

package watermill_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
)

// The stress tests run in make crash, not in make test. The stress build
// tag also makes Watermill's suite wait five times longer and doubles
// GOMAXPROCS.
//
//	cd watermill && go test -race -tags stress -run 'TestPubSubStress|TestPubSubFull' ./...

// TestPubSubStress is Watermill's stress variant of the suite: many runs of
// TestPubSub at once (STRESS_TEST_COUNT, default 10), on Standard and on
// FIFO queues, all on one machine's two cores. They run at the short sizes
// (see short): at the full sizes, ten runs under -race would take hours.
func TestPubSubStress(t *testing.T) {
	t.Run("Standard", func(t *testing.T) {
		t.Parallel()
		s := newSuite(suiteQueue)
		tests.TestPubSubStressTest(t, short(standardFeatures), s.pubSub, s.groupPubSub)
	})
	t.Run("FIFO", func(t *testing.T) {
		t.Parallel()
		s := newSuite(fifoQueue())
		tests.TestPubSubStressTest(t, short(fifoFeatures), s.pubSub, s.groupPubSub)
	})
}

// TestPubSubFull runs the suite once at its full sizes (10,000 messages,
// 50 subscriptions) on Standard queues: about six minutes under -race.
// The FIFO queue is left at the short sizes: it hands out one message at
// a time, and its full run did not finish in ten minutes under -race.
func TestPubSubFull(t *testing.T) {
	s := newSuite(suiteQueue)
	tests.TestPubSub(t, standardFeatures, s.pubSub, s.groupPubSub)
}
