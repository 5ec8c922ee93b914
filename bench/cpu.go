package main

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time this process has used so far, user and
// system, for the client CPU/cycle column; 0 if the kernel will not say.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
