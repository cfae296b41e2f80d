//go:build unix

package consumer_test

import "syscall"

// processCPU returns the CPU time (user and system) the process has used,
// in microseconds, for a benchmark's CPU per message.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano()/1e3 + ru.Stime.Nano()/1e3
}
