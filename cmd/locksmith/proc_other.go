//go:build !unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// forwardedSignals are the signals locksmith passes on to COMMAND.
var forwardedSignals = []os.Signal{os.Interrupt}

// stopSignals are the signals that ask elect to stop.
var stopSignals = []os.Signal{os.Interrupt}

// A child is COMMAND. locksmith run needs process groups and signals, so
// on this system it starts nothing.
type child struct {
	cmd    *exec.Cmd
	exited chan error
}

func startChild(string, []string, []string) (*child, error) {
	return nil, errors.New("locksmith run is not supported on " + runtime.GOOS)
}

func (c *child) signalGroup(syscall.Signal) error { return nil }

func (c *child) groupAlive() bool { return false }

func (c *child) exitStatus() int { return c.cmd.ProcessState.ExitCode() }

func (c *child) signaled() (os.Signal, bool) { return nil, false }

func signalName(sig os.Signal) string { return sig.String() }

func signalNumber(os.Signal) int { return 0 }
