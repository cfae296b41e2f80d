//go:build crash_injection

package nats_test

// clusterN is the number of messages TestClusterLeaderLoss relays in
// make crash; make test relays 2,000.
const clusterN = 20000
