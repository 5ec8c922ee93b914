//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts the child in a process group of its own. Only Linux can
// kill the child when locksmith dies; elsewhere a child whose locksmith was
// killed runs on without the lock.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
