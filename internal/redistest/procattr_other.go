//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil: only Linux can kill the server when the process
// that started it dies. Elsewhere a test binary that is killed leaves its
// servers running.
func sysProcAttr() *syscall.SysProcAttr { return nil }
