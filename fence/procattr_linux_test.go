package fence_test

import "syscall"

// procAttr runs a database server as the user uid:gid (when the tests run
// as root, which the server refuses to be) and has the kernel stop it with
// SIGINT (PostgreSQL's fast shutdown) if the test binary dies.
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT}
}
