//go:build !crash_injection

package kafka_test

// sourceCrashN and sourceCrashKills size TestSourceCrash in make test;
// make crash (build tag crash_injection) runs 3,000 records and 8 kills.
const sourceCrashN, sourceCrashKills = 1000, 4
