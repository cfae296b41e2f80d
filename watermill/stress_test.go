//go:build stress

package watermill_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
)

// TestPubSubStress is Watermill's stress variant of the suite: several
// full-size runs of TestPubSub at once (STRESS_TEST_COUNT, default 10), on
// Standard and on FIFO queues. The stress build tag also makes Watermill's
// suite wait five times longer and doubles GOMAXPROCS. It runs in make
// crash:
//
//	cd watermill && go test -race -tags stress -run TestPubSubStress ./...
func TestPubSubStress(t *testing.T) {
	t.Run("Standard", func(t *testing.T) {
		t.Parallel()
		s := newSuite(suiteQueue)
		tests.TestPubSubStressTest(t, standardFeatures, s.pubSub, noConsumerGroups)
	})
	t.Run("FIFO", func(t *testing.T) {
		t.Parallel()
		s := newSuite(fifoQueue())
		tests.TestPubSubStressTest(t, fifoFeatures, s.pubSub, noConsumerGroups)
	})
}
