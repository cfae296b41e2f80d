// Package conformance is mqlite's behavioural test kit: every promise of the
// queue (fencing, order, the delivery bound, replays, de-duplication, time to
// live, scheduling, dead letters, receive-and-delete, renewal, namespaces,
// recovery, closing, wake-ups, group commit and the hand-off to a waiting
// Receive) as a named subtest that runs against any
// implementation, the embedded *mqlite.Store today and the broker's client
// or another engine tomorrow. It is written against behaviour, not against
// SQLite.
//
// An implementation proves itself by calling Run from one of its tests:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Harness{
//			Open:     openMyStore, // a fresh, empty implementation per subtest
//			Features: conformance.Features{},
//		})
//	}
//
// Run starts every subtest in parallel, each on its own implementation from
// Harness.Open, with a fake clock that the kit moves instead of sleeping
// (only the wake-up subtests at a due moment run on the wall clock, since a
// fake clock has no timers; the WakeBubble area runs them inside a
// testing/synctest bubble, where that clock is exact and the kit knows the
// receiver waits before it commits). A Features field set to a reason switches off
// what an implementation legitimately lacks; the subtests that need it are
// skipped with that reason in the test output.
//
// docs/conformance.md lists every promise next to the subtest that pins it.
package conformance
