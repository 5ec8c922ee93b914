package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name under which a Sentinel group monitors its
// master.
const SentinelMaster = "m"

// sentinelTimeout bounds how long a Sentinel group may take to come up,
// and a failover to complete.
const sentinelTimeout = 30 * time.Second

// A Sentinel is a Redis Sentinel deployment started by NewSentinel or
// SharedSentinel: a master and a replica, monitored by three sentinels
// under the name SentinelMaster with a quorum of 2, which consider the
// master down after 1s without an answer. Failover, KillMaster and
// StallReplica must not be called concurrently.
type Sentinel struct {
	// Servers are the two data servers; which one is the master changes
	// with each failover: see Master.
	Servers [2]*Server
	// Addrs are the sentinels' addresses.
	Addrs []string

	sentinels []*sentinelProc
}

// NewSentinel starts a Sentinel deployment for t and stops it when t ends.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	Require(t)
	return startFor(t, StartSentinel)
}

var sharedSentinel sharedDeployment[*Sentinel]

// SharedSentinel returns a Sentinel deployment started once per test
// binary. Tests that use it must use keys of their own; one that fails the
// master over must leave a master and a linked replica behind, as
// Failover and KillMaster do. Call StopSharedSentinel from TestMain after
// m.Run.
func SharedSentinel(t testing.TB) *Sentinel {
	t.Helper()
	Require(t)
	return sharedSentinel.get(t, "sentinel", StartSentinel)
}

// StopSharedSentinel stops the deployment SharedSentinel started, if any,
// and removes its files.
func StopSharedSentinel() { sharedSentinel.stop() }

// StartSentinel starts a master, a replica of it and three sentinels, in
// subdirectories of dir, and waits until every sentinel knows the master,
// the replica and the other sentinels. On failure it stops what it
// started.
func StartSentinel(dir string) (*Sentinel, error) {
	s := &Sentinel{}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	repl := []string{"--repl-diskless-sync-delay", "0"}
	for i := range s.Servers {
		sub := filepath.Join(dir, fmt.Sprintf("server%d", i))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return nil, err
		}
		args := repl
		if i == 1 {
			host, port, _ := net.SplitHostPort(s.Servers[0].Addr)
			args = append(args, "--replicaof", host, port)
		}
		srv, err := Start(sub, args...)
		if err != nil {
			return nil, err
		}
		s.Servers[i] = srv
	}
	for i := range 3 {
		p, err := startSentinel(filepath.Join(dir, fmt.Sprintf("sentinel%d", i)), s.Servers[0].Addr)
		if err != nil {
			return nil, err
		}
		s.sentinels = append(s.sentinels, p)
		s.Addrs = append(s.Addrs, p.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	if err := s.waitHealthy(ctx, s.Servers[0]); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// Stop stops the sentinels and the servers, by pid, and waits for them.
// It is safe to call more than once. (StopSharedSentinel also removes the
// files of the deployment SharedSentinel started.)
func (s *Sentinel) Stop() {
	var wg sync.WaitGroup
	for _, p := range s.sentinels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop()
		}()
	}
	for _, srv := range s.Servers {
		if srv != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				srv.Stop()
			}()
		}
	}
	wg.Wait()
}

// FailoverOptions returns options for a go-redis failover client of the
// deployment.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.Addrs, Protocol: 2}
}

// Client returns a new failover client, closed when t ends. Each call
// opens its own connection pools.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(s.FailoverOptions())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Master returns the server that every sentinel reports as the master.
func (s *Sentinel) Master(ctx context.Context) (*Server, error) {
	var master *Server
	for _, addr := range s.Addrs {
		m, err := s.masterSeenBy(ctx, addr)
		if err != nil {
			return nil, err
		}
		if master != nil && m != master {
			return nil, fmt.Errorf("the sentinels disagree on the master: %s and %s", master.Addr, m.Addr)
		}
		master = m
	}
	return master, nil
}

// Replica returns the server that is not the master.
func (s *Sentinel) Replica(ctx context.Context) (*Server, error) {
	m, err := s.Master(ctx)
	if err != nil {
		return nil, err
	}
	return s.other(m), nil
}

// sentinelDo sends one command to the sentinel at addr.
func (s *Sentinel) sentinelDo(ctx context.Context, addr string, args ...any) *redis.Cmd {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1})
	defer c.Close()
	return c.Do(ctx, args...)
}

// fields turns a sentinel's flat list of names and values into a map.
func fields(v any) map[string]string {
	m := map[string]string{}
	list, _ := v.([]any) // RESP2, which the clients here speak
	for i := 0; i+1 < len(list); i += 2 {
		k, _ := list[i].(string)
		val, _ := list[i+1].(string)
		m[k] = val
	}
	return m
}

// A sentinelProc is one redis-server running in sentinel mode. Sentinel
// needs a configuration file it can rewrite, named as the first argument,
// which Start cannot give it.
type sentinelProc struct {
	addr string
	proc *process // nil once stopped
}

// startSentinel starts a sentinel, whose files live in dir, on a free
// port, monitoring the master at masterAddr.
func startSentinel(dir, masterAddr string) (*sentinelProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	host, mport, err := net.SplitHostPort(masterAddr)
	if err != nil {
		return nil, err
	}
	var errs []error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
logfile %s
sentinel monitor %s %s %s 2
sentinel down-after-milliseconds %[4]s 1000
sentinel failover-timeout %[4]s 5000
sentinel parallel-syncs %[4]s 1
`, port, dir, filepath.Join(dir, "sentinel.log"), SentinelMaster, host, mport)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return nil, err
		}
		cmd := exec.Command("redis-server", conf, "--sentinel")
		// Errors in the configuration go to the output, not the log.
		var output bytes.Buffer
		cmd.Stdout, cmd.Stderr = &output, &output
		proc, err := startProcess(cmd)
		if err != nil {
			return nil, fmt.Errorf("start sentinel: %w", err)
		}
		p := &sentinelProc{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), proc: proc}
		if err := waitReady(p.addr, "", proc); err != nil {
			p.stop()
			log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			errs = append(errs, fmt.Errorf("sentinel on %s: %w (output: %s; log: %s)", p.addr, err, tail(output.String()), tail(string(log))))
			continue
		}
		return p, nil
	}
	return nil, errors.Join(errs...)
}

// stop terminates the sentinel, by pid, and waits for it.
func (p *sentinelProc) stop() {
	if p.proc == nil {
		return
	}
	p.proc.stop(syscall.SIGTERM)
	p.proc = nil
}

// tail returns the end of a log, short enough for an error message.
func tail(log string) string {
	const n = 500
	if len(log) > n {
		return log[len(log)-n:]
	}
	return log
}
