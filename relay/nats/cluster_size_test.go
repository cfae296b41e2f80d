//go:build !crash_injection

package nats_test

// clusterN is the number of messages TestClusterLeaderLoss relays in
// make test; make crash (build tag crash_injection) relays 20,000.
const clusterN = 2000
