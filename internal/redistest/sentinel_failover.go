package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Faults of a Sentinel deployment: a failover, a master killed, a replica
// stalled, and the waits for the deployment to be healthy again.

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
