//go:build crash_injection

package kafka_test

// crashN and crashKills size TestRelayCrashDuplicates in make crash; make
// test runs 2,000 messages and 3 kills.
const crashN, crashKills = 5000, 5
