package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Running COMMAND while something is held: the supervisor that run and
// elect share.

// A supervisor runs COMMAND while something is held (a lock, a permit,
// the leadership of an election), passes the signals locksmith receives
// on to it, and stops it when what is held is lost. run and elect share
// it.
type supervisor struct {
	*ui
	command []string // COMMAND and its arguments
	path    string   // COMMAND found on $PATH
	grace   time.Duration
	sigs    <-chan os.Signal
	// stops reports whether a signal asks locksmith to stop rather than
	// only to pass it on; nil means that every signal does (run). A
	// signal that does not stop locksmith is passed on to COMMAND while
	// it runs, and ignored otherwise.
	stops func(os.Signal) bool
	// lostEvent names the JSON record of a loss of what is held: "lost"
	// (run) or "term_lost" (elect).
	lostEvent string
	// events is the Locker's observer with --log-format json, nil
	// otherwise.
	events *libraryEvents
}

// stopsOn reports whether sig asks locksmith to stop.
func (s *supervisor) stopsOn(sig os.Signal) bool {
	return s.stops == nil || s.stops(sig)
}

// An interrupter ends the wait for the lock when a signal that stops
// locksmith arrives, by cancelling the context of the wait. It watches
// from when run starts until COMMAND is about to start; supervise then
// takes the signals over. It ignores the other signals.
type interrupter struct {
	stopWatch chan struct{} // closed by stop
	once      sync.Once
	done      chan struct{} // closed when the watching goroutine has returned
	sig       os.Signal     // the signal that ended the wait; set before done is closed
}

// interruptOnSignal starts watching for a signal that stops locksmith,
// and returns the interrupter, whose stop the caller must call.
func (s *supervisor) interruptOnSignal(cancel context.CancelFunc) *interrupter {
	in := &interrupter{stopWatch: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(in.done)
		for {
			select {
			case sig := <-s.sigs:
				if !s.stopsOn(sig) {
					continue
				}
				in.sig = sig
				cancel()
			case <-in.stopWatch:
			}
			return
		}
	}()
	return in
}

// stop stops watching for signals, waits until the watching goroutine has
// returned, and returns the signal that ended the wait, or nil. It may be
// called more than once.
func (in *interrupter) stop() os.Signal {
	in.once.Do(func() { close(in.stopWatch) })
	<-in.done
	return in.sig
}

// An outcome is how supervise ended.
type outcome struct {
	status  int  // the exit status: COMMAND's own, if nothing went wrong
	ran     bool // COMMAND was started
	stopped bool // COMMAND was stopped because what was held was lost
	// stopSig is the first signal that asks locksmith to stop, received
	// before COMMAND started (which it then did not) or while it ran (it
	// was passed on); nil if none came.
	stopSig os.Signal
}

// supervise runs COMMAND with env and waits for it to exit, passing on
// the signals locksmith receives. If lease ends, what is held (as what
// names it) is lost: COMMAND's process group gets SIGTERM, and SIGKILL if
// anything in it outlives the grace period.
func (s *supervisor) supervise(what string, env []string, lease context.Context) outcome {
	// A signal that came, or a loss that happened, while what is held was
	// obtained stops the run here.
	for pending := true; pending; {
		select {
		case sig := <-s.sigs:
			if !s.stopsOn(sig) {
				continue // nothing to pass it on to
			}
			s.report(slog.LevelWarn, "interrupted",
				fmt.Sprintf("got signal %q before %q started; not running it", sig, s.command[0]),
				slog.String("signal", signalName(sig)))
			return outcome{status: exitSignal + signalNumber(sig), stopSig: sig}
		case <-lease.Done():
			cause := context.Cause(lease)
			s.report(slog.LevelError, s.lostEvent,
				fmt.Sprintf("lost %s before %q started (%s); not running it", what, s.command[0], lostText(cause)),
				slog.String("cause", lostText(cause)), slog.Bool("child_started", false))
			return outcome{status: exitLost}
		default:
			pending = false
		}
	}

	// See sysProcAttr: the parent-death signal follows this thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := startChild(s.path, s.command, env)
	if err != nil {
		s.errorf("cannot run %q: %v", s.command[0], err)
		return outcome{status: exitCannotRun}
	}
	pid := slog.Int("pid", c.cmd.Process.Pid)
	s.report(slog.LevelInfo, "child_started", "", slog.String("command", s.command[0]), pid)

	var (
		leaseDone = lease.Done()
		graceDone <-chan time.Time // from the SIGTERM sent on loss to the SIGKILL
		stopped   bool
		stopSig   os.Signal
	)
	for {
		select {
		case <-c.exited:
			s.reportExit(c, pid)
			if !stopped {
				return outcome{status: c.exitStatus(), ran: true, stopSig: stopSig}
			}
			s.stopGroup(c, graceDone)
			return outcome{status: exitLost, ran: true, stopped: true, stopSig: stopSig}
		case sig := <-s.sigs:
			if stopSig == nil && s.stopsOn(sig) {
				stopSig = sig
			}
			if ss, ok := sig.(syscall.Signal); ok {
				s.report(slog.LevelInfo, "signal_forwarded", "", slog.String("signal", signalName(sig)), pid)
				s.kill(c, ss)
			}
		case <-leaseDone:
			leaseDone, stopped = nil, true
			cause := context.Cause(lease)
			s.report(slog.LevelError, s.lostEvent,
				fmt.Sprintf("lost %s while %q ran (%s); sending SIGTERM to its process group (SIGKILL after %v)",
					what, s.command[0], lostText(cause), s.grace),
				slog.String("cause", lostText(cause)), slog.Bool("child_started", true))
			s.report(slog.LevelWarn, "child_killed", "", slog.String("signal", "SIGTERM"), pid, millis("grace_ms", s.grace))
			s.kill(c, syscall.SIGTERM)
			graceDone = time.After(s.grace)
		case <-graceDone:
			graceDone = nil
			s.report(slog.LevelWarn, "child_killed",
				fmt.Sprintf("%q still running %v after SIGTERM; sending SIGKILL", s.command[0], s.grace),
				slog.String("signal", "SIGKILL"), pid)
			s.kill(c, syscall.SIGKILL)
		}
	}
}

// stopGroup waits, after COMMAND itself has exited, for the rest of its
// process group to exit, and kills what is left when graceDone fires. A
// nil graceDone means SIGKILL was sent already.
func (s *supervisor) stopGroup(c *child, graceDone <-chan time.Time) {
	if graceDone == nil {
		return
	}
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for c.groupAlive() {
		select {
		case <-graceDone:
			s.report(slog.LevelWarn, "child_killed",
				fmt.Sprintf("processes started by %q still running %v after SIGTERM; sending SIGKILL", s.command[0], s.grace),
				slog.String("signal", "SIGKILL"), slog.Int("pid", c.cmd.Process.Pid), slog.Bool("group_only", true))
			s.kill(c, syscall.SIGKILL)
			return
		case <-poll.C:
		}
	}
}

// reportExit writes the JSON record of COMMAND's exit.
func (s *supervisor) reportExit(c *child, pid slog.Attr) {
	if s.log == nil {
		return
	}
	attrs := []slog.Attr{pid, slog.Int("status", c.exitStatus())}
	if sig, ok := c.signaled(); ok {
		attrs = append(attrs, slog.String("signal", signalName(sig)))
	}
	s.report(slog.LevelInfo, "child_exited", "", attrs...)
}

func (s *supervisor) kill(c *child, sig syscall.Signal) {
	if err := c.signalGroup(sig); err != nil {
		s.errorf("cannot send %v to %q: %v", sig, s.command[0], err)
	}
}

// lookPath finds the program name on $PATH. When it cannot, it reports
// why and returns the exit status, which is otherwise exitOK.
func (u *ui) lookPath(name string) (string, int) {
	path, err := exec.LookPath(name)
	if err != nil {
		u.errorf("cannot run %q: %v", name, err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return "", exitNotFound
		}
		return "", exitCannotRun
	}
	return path, exitOK
}

// notifySignals relays the forwarded signals to sigs, except those that
// were ignored when locksmith started, which stay ignored (by locksmith and
// by COMMAND).
func notifySignals(sigs chan<- os.Signal) {
	for _, sig := range forwardedSignals {
		if !signal.Ignored(sig) {
			signal.Notify(sigs, sig)
		}
	}
}
