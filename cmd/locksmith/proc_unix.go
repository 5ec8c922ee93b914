//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// forwardedSignals are the signals locksmith passes on to COMMAND's process
// group. Those ignored when locksmith started (nohup ignores SIGHUP, a
// shell's background job SIGINT and SIGQUIT) stay ignored: see
// notifySignals.
var forwardedSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP,
	syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// stopSignals are the signals that ask elect to stop: to exit once
// COMMAND has exited, rather than campaign again. They are passed on to
// COMMAND too; SIGUSR1 and SIGUSR2 are only passed on.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// A child is COMMAND, running in a process group of its own, so that a
// signal can reach everything it started.
type child struct {
	cmd *exec.Cmd
	// exited receives the result of cmd.Wait, once; cmd.ProcessState is
	// set by then.
	exited chan error
}

// startChild starts the program at path with args (args[0] is its name)
// and env, in a new process group, sharing locksmith's standard streams. On
// Linux the child is killed if locksmith dies; the goroutine calling
// startChild must stay locked to its OS thread until the child has exited
// (see sysProcAttr). The caller owns the goroutine that waits for the
// child and must receive from exited before it returns.
func startChild(path string, args, env []string) (*child, error) {
	cmd := &exec.Cmd{
		Path:        path,
		Args:        args,
		Env:         env,
		Stdin:       os.Stdin,
		Stdout:      os.Stdout,
		Stderr:      os.Stderr,
		SysProcAttr: sysProcAttr(),
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, exited: make(chan error, 1)}
	go func() { c.exited <- cmd.Wait() }()
	return c, nil
}

// signalGroup sends sig to every process in the child's process group. A
// group that no longer exists is not an error.
func (c *child) signalGroup(sig syscall.Signal) error {
	err := syscall.Kill(-c.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// groupAlive reports whether any process is left in the child's process
// group.
func (c *child) groupAlive() bool {
	return !errors.Is(syscall.Kill(-c.cmd.Process.Pid, 0), syscall.ESRCH)
}

// exitStatus returns the status a shell reports for the exited child: its
// exit code, or 128+N if signal N killed it.
func (c *child) exitStatus() int {
	state := c.cmd.ProcessState
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return state.ExitCode()
}

// signaled returns the signal that killed the exited child, if one did.
func (c *child) signaled() (os.Signal, bool) {
	ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return nil, false
	}
	return ws.Signal(), true
}

// signalNames are the names of the signals that the JSON log names, as
// kill -l gives them with the SIG prefix.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
	syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
}

// signalName returns sig's name, such as "SIGTERM", or "signal N" for
// one without a name here.
func signalName(sig os.Signal) string {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return sig.String()
	}
	if name, ok := signalNames[s]; ok {
		return name
	}
	return "signal " + strconv.Itoa(int(s))
}

// signalNumber returns sig's number.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}
