package conformance

import "testing"

// subtest is one promise, pinned.
type subtest struct {
	name string
	run  func(t *testing.T, h Harness)
}

// group is the subtests of one area of promises.
type group struct {
	name  string
	tests []subtest
}

// Run runs every conformance subtest against the implementations h opens,
// in parallel, each on its own fresh implementation. The subtests are named
// Area/Promise (for example Fencing/CompleteAtExactDeadline); run one with
// go test -run 'Conformance/Fencing/CompleteAtExactDeadline'. It blocks
// until every subtest has finished.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("conformance: Harness.Open is nil")
	}
	for _, g := range groups() {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, s := range g.tests {
				t.Run(s.name, func(t *testing.T) {
					t.Parallel()
					s.run(t, h)
				})
			}
		})
	}
}

// groups lists every subtest, area by area.
func groups() []group {
	return []group{
		{"Transaction", transactionTests},
		{"Claim", claimTests},
		{"Fencing", fencingTests()},
		{"Order", orderTests},
		{"DeliveryBound", boundTests},
		{"Receipts", receiptTests()},
		{"Attempts", attemptTests},
		{"Dedup", dedupTests},
		{"TTL", ttlTests},
		{"Schedule", scheduleTests},
		{"DeadLetters", deadLetterTests},
		{"ReceiveAndDelete", receiveAndDeleteTests},
		{"Renew", renewTests},
		{"Namespace", namespaceTests},
		{"Recovery", recoveryTests},
		{"Lifecycle", lifecycleTests},
		{"Wake", wakeTests},
		{"WakeBubble", wakeBubbleTests},
		{"Topics", topicTests},
		{"Periodic", periodicTests},
		{"Pause", pauseTests},
		{"LastError", lastErrorTests},
		{"Priority", priorityTests},
		{"LoopFailures", loopFailureTests()},
		{"Effects", effectTests},
		{"GroupCommit", groupCommitTests},
		{"Handoff", handoffTests},
		{"Inbound", inboundTests},
		{"Intake", intakeTests},
		{"Jobs", jobTests},
	}
}
