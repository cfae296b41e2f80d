//go:build !crash_injection

package nats_test

// sourceCrashN and sourceCrashKills size TestSourceCrash in make test;
// make crash (build tag crash_injection) runs 3,000 messages and 8 kills.
const sourceCrashN, sourceCrashKills = 1000, 4
