//go:build !linux

package fence_test

import "syscall"

// procAttr runs a database server as the user uid:gid (when the tests run
// as root, which the server refuses to be).
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
