//go:build crash_injection

package kafka_test

// sourceCrashN and sourceCrashKills size TestSourceCrash in make crash;
// make test runs 1,000 records and 4 kills.
const sourceCrashN, sourceCrashKills = 3000, 8
