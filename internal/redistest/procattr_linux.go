package redistest

import "syscall"

// sysProcAttr has the kernel kill the server when the process that started
// it dies, so that a test binary that crashes or is killed leaves no server
// behind.
//
// Linux sends the signal when the thread that started the server exits,
// not the process; Go's runtime only ends threads that a goroutine left
// locked, which the tests that start servers do not do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
