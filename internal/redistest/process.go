package redistest

import (
	"os/exec"
	"syscall"
	"time"
)

// A process is a started redis-server, in server or sentinel mode, and
// the goroutine that waits for it. That goroutine returns once the process
// has exited; stop waits for it.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned
	err    error         // what cmd.Wait returned; set before exited is closed
}

// startProcess starts cmd, to be killed if the test binary dies (see
// sysProcAttr).
func startProcess(cmd *exec.Cmd) (*process, error) {
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop sends sig to the process and waits until it has exited, sending
// SIGKILL if it is still running 10s later. It may be called after the
// process has exited.
func (p *process) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}
