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
	"strings"
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

// Failover has the sentinels fail the master over to the replica with
// SENTINEL FAILOVER, a planned switch in which the old master keeps
// running and becomes a replica of the new one. It returns the new
// master once every sentinel reports it and the old master replicates it.
func (s *Sentinel) Failover(ctx context.Context) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, sentinelTimeout)
	defer cancel()
	old, err := s.healthyMaster(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.sentinelDo(ctx, s.Addrs[0], "sentinel", "failover", SentinelMaster).Err(); err != nil {
		return nil, fmt.Errorf("SENTINEL FAILOVER: %w", err)
	}
	promoted := s.other(old)
	if err := s.waitPromoted(ctx, promoted); err != nil {
		return nil, err
	}
	// The sentinels make the old master a replica too, but only after
	// their next look at it, up to 10s later: do it now.
	if err := s.follow(ctx, old, promoted); err != nil {
		return nil, err
	}
	if err := s.waitHealthy(ctx, promoted); err != nil {
		return nil, err
	}
	return promoted, nil
}

// KillMaster kills the master with SIGKILL at once, as a crash would,
// and waits until every sentinel reports the replica promoted in its
// place. Writes the replica had not received are lost. It then restarts
// the old master, empty, as a replica of the new one, and waits until the
// deployment is healthy again (see WaitHealthy). It returns the new master
// and how long the sentinels took to promote it.
//
// Unlike Failover it does not wait for the deployment to be healthy
// first: call WaitHealthy before, unless the test means to kill a master
// whose replica is behind.
func (s *Sentinel) KillMaster(ctx context.Context) (*Server, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, sentinelTimeout)
	defer cancel()
	old, err := s.Master(ctx)
	if err != nil {
		return nil, 0, err
	}
	promoted := s.other(old)
	old.Kill()
	killed := time.Now()
	if err := s.waitPromoted(ctx, promoted); err != nil {
		return nil, 0, err
	}
	took := time.Since(killed)
	if err := old.Start(); err != nil {
		return nil, 0, fmt.Errorf("restart the old master: %w", err)
	}
	if err := s.follow(ctx, old, promoted); err != nil {
		return nil, 0, err
	}
	if err := s.waitHealthy(ctx, promoted); err != nil {
		return nil, 0, err
	}
	return promoted, took, nil
}

// StallReplica keeps the master's writes from reaching the replica for
// about d: it makes the replica sleep (DEBUG SLEEP) and closes its
// replication link on the master's side, so that what the master accepts
// from then on reaches the replica only when it wakes and reconnects, if
// the master is still there. A test that kills the master (KillMaster)
// before d has passed shows a failover that loses acknowledged writes. d
// should stay under the sentinels' down-after time (1s), or they mark the
// replica down too. It returns a function that waits until the replica is
// awake and returns its error.
func (s *Sentinel) StallReplica(ctx context.Context, d time.Duration) (awake func() error, err error) {
	master, err := s.Master(ctx)
	if err != nil {
		return nil, err
	}
	replica := s.other(master)
	opt := replica.Options()
	opt.ReadTimeout = d + 5*time.Second
	sleeper := redis.NewClient(opt)
	done := make(chan error, 1)
	go func() {
		defer sleeper.Close()
		done <- sleeper.Do(context.WithoutCancel(ctx), "debug", "sleep", d.Seconds()).Err()
	}()
	awake = func() error { return <-done }
	// The replica is asleep once it stops answering.
	probe := replica.Options()
	probe.ReadTimeout, probe.MaxRetries = 20*time.Millisecond, -1
	prober := redis.NewClient(probe)
	defer prober.Close()
	for prober.Ping(ctx).Err() == nil {
		select {
		case err := <-done:
			return nil, fmt.Errorf("DEBUG SLEEP on %s ended before it was seen asleep: %v", replica.Addr, err)
		case <-time.After(time.Millisecond):
		}
	}
	if err := do(ctx, master, "client", "kill", "type", "replica").Err(); err != nil {
		_ = awake()
		return nil, fmt.Errorf("CLIENT KILL TYPE replica on %s: %w", master.Addr, err)
	}
	return awake, nil
}

// waitPromoted waits until every sentinel reports promoted as the master.
func (s *Sentinel) waitPromoted(ctx context.Context, promoted *Server) error {
	return poll(ctx, "the sentinels to promote "+promoted.Addr, func() error {
		m, err := s.Master(ctx)
		if err == nil && m != promoted {
			err = fmt.Errorf("master still %s", m.Addr)
		}
		return err
	})
}

// follow makes srv a replica of master.
func (s *Sentinel) follow(ctx context.Context, srv, master *Server) error {
	host, port, _ := net.SplitHostPort(master.Addr)
	if err := do(ctx, srv, "replicaof", host, port).Err(); err != nil {
		return fmt.Errorf("REPLICAOF on %s: %w", srv.Addr, err)
	}
	return nil
}

// WaitHealthy waits until the sentinels agree on the master and see the
// replica and one another, and the replica is linked to the master.
func (s *Sentinel) WaitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, sentinelTimeout)
	defer cancel()
	_, err := s.healthyMaster(ctx)
	return err
}

// healthyMaster waits until the deployment is healthy and returns its
// master.
func (s *Sentinel) healthyMaster(ctx context.Context) (*Server, error) {
	var master *Server
	err := poll(ctx, "a master agreed on by all sentinels", func() error {
		var err error
		master, err = s.Master(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return master, s.waitHealthy(ctx, master)
}

// waitHealthy waits until every sentinel reports master as the master,
// the other server as a replica that answers, and the two other
// sentinels; and until the replica itself reports its link to master up.
// (What the sentinels know of the replica's link comes from INFO, which
// they ask for only every 10s while the master is up, and every second
// once it is down, in time to choose a replica to promote.)
func (s *Sentinel) waitHealthy(ctx context.Context, master *Server) error {
	replica := s.other(master)
	return poll(ctx, fmt.Sprintf("sentinels to see master %s and replica %s", master.Addr, replica.Addr), func() error {
		for _, addr := range s.Addrs {
			m, err := s.masterSeenBy(ctx, addr)
			if err != nil {
				return err
			}
			if m != master {
				return fmt.Errorf("sentinel %s: master is %s", addr, m.Addr)
			}
			replicas, err := s.sentinelDo(ctx, addr, "sentinel", "replicas", SentinelMaster).Slice()
			if err != nil {
				return fmt.Errorf("sentinel %s: SENTINEL REPLICAS: %w", addr, err)
			}
			seen := false
			for _, r := range replicas {
				f := fields(r)
				if net.JoinHostPort(f["ip"], f["port"]) == replica.Addr {
					seen = f["flags"] == "slave"
				}
			}
			if !seen {
				return fmt.Errorf("sentinel %s: replica %s not seen in good standing", addr, replica.Addr)
			}
			others, err := s.sentinelDo(ctx, addr, "sentinel", "sentinels", SentinelMaster).Slice()
			if err != nil {
				return fmt.Errorf("sentinel %s: SENTINEL SENTINELS: %w", addr, err)
			}
			if len(others) != len(s.Addrs)-1 {
				return fmt.Errorf("sentinel %s: knows %d other sentinels", addr, len(others))
			}
		}
		info, err := do(ctx, replica, "info", "replication").Text()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up\r\n") {
			return fmt.Errorf("replica %s: link down", replica.Addr)
		}
		return nil
	})
}

// masterSeenBy returns the server that the sentinel at addr reports as
// the master.
func (s *Sentinel) masterSeenBy(ctx context.Context, addr string) (*Server, error) {
	hp, err := s.sentinelDo(ctx, addr, "sentinel", "get-master-addr-by-name", SentinelMaster).StringSlice()
	if err != nil || len(hp) != 2 {
		return nil, fmt.Errorf("sentinel %s: master address: %v %v", addr, hp, err)
	}
	for _, srv := range s.Servers {
		if srv.Addr == net.JoinHostPort(hp[0], hp[1]) {
			return srv, nil
		}
	}
	return nil, fmt.Errorf("sentinel %s: unknown master %v", addr, hp)
}

func (s *Sentinel) other(srv *Server) *Server {
	if srv == s.Servers[0] {
		return s.Servers[1]
	}
	return s.Servers[0]
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
