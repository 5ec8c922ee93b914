package main

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A holdTimer keeps a contended worker in its critical section for a
// precise time without using a CPU.
//
// time.Sleep is not precise enough to compare libraries here: when every
// goroutine is blocked, the Go runtime waits in epoll_wait, whose timeout
// is in whole milliseconds, so Sleep(2.3ms) takes about 3.1ms in a process
// that is idle (one woken by notifications) and less in one that is busy
// polling, which would hand the pollers shorter critical sections. A
// timerfd read through the runtime's poller wakes within the kernel's timer
// slack (about 50us) whatever else the process does, and lets the other
// goroutines run meanwhile.
type holdTimer struct {
	fd int
	f  *os.File // reads block the goroutine in the runtime's poller, not a thread
}

func newHoldTimer() (*holdTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("timerfd_create", err)
	}
	// A non-blocking descriptor makes a File that uses the poller. Its Fd
	// method must not be called: it would switch it back to blocking.
	return &holdTimer{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}, nil
}

// sleep blocks the calling goroutine for d.
func (t *holdTimer) sleep(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		return os.NewSyscallError("timerfd_settime", err)
	}
	var expirations [8]byte
	_, err := t.f.Read(expirations[:])
	return err
}

func (t *holdTimer) close() { _ = t.f.Close() }
