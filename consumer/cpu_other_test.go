//go:build !unix

package consumer_test

// processCPU is 0 where getrusage is missing: no CPU per message is
// reported there.
func processCPU() int64 { return 0 }
