//go:build !crash_injection

package kafka_test

// crashN and crashKills size TestRelayCrashDuplicates in make test; make
// crash (build tag crash_injection) runs 5,000 messages and 5 kills.
const crashN, crashKills = 1000, 2
