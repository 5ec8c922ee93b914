package main

import "syscall"

// sysProcAttr puts the child in a process group of its own and has the
// kernel kill it with SIGKILL when locksmith dies, even by SIGKILL, so that
// it never runs on after its lock can no longer be renewed.
//
// Linux sends the parent-death signal when the thread that started the
// child exits, not the process, so the goroutine that starts the child
// must stay locked to its thread while the child runs.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
