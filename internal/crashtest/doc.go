// Package crashtest holds the SIGKILL crash-injection test. It has no code:
// the test is behind the crash_injection build tag (make crash) because it
// re-executes its own binary as a worker process and kills it, many times.
package crashtest
