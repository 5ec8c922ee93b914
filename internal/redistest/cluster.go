package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds how long a cluster may take to form, and a slot
// migration to finish.
const clusterTimeout = 30 * time.Second

// A Cluster is a Redis Cluster of redis-server processes started by
// NewCluster or SharedCluster: masters that share the 16384 slots evenly,
// each with its replicas, every node on its own loopback port and in its
// own directory (which holds its nodes.conf). It is safe for concurrent
// use, but MigrateSlot calls must not overlap.
type Cluster struct {
	// Nodes are the cluster's servers, in the order they were started;
	// Masters tells which of them serve slots. A node keeps its place,
	// and its node ID, for the cluster's life.
	Nodes []*Server

	ids []string // node IDs, by index in Nodes
}

// RequireCLI skips t, or fails it when Required, unless redis-server and
// redis-cli (which comes with it) are on PATH.
func RequireCLI(t testing.TB) {
	t.Helper()
	Require(t)
	if _, err := exec.LookPath("redis-cli"); err != nil {
		missing(t, &cliNotice, "redis-cli", "redis-cli to build a Redis Cluster",
			"It comes with redis-server (apt-get install redis-server, brew install redis)")
	}
}

// NewCluster starts a cluster of masters, each with replicasPerMaster
// replicas, for t, and stops it when t ends.
func NewCluster(t testing.TB, masters, replicasPerMaster int) *Cluster {
	t.Helper()
	RequireCLI(t)
	return startFor(t, func(dir string) (*Cluster, error) { return StartCluster(dir, masters, replicasPerMaster) })
}

var sharedCluster sharedDeployment[*Cluster]

// SharedCluster returns a cluster of 3 masters with 1 replica each,
// started once per test binary. Tests that use it must use keys of their
// own and leave every slot served (MigrateSlot may move slots between
// masters). Call StopSharedCluster from TestMain after m.Run.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	RequireCLI(t)
	return sharedCluster.get(t, "cluster", func(dir string) (*Cluster, error) { return StartCluster(dir, 3, 1) })
}

// StopSharedCluster stops the cluster SharedCluster started, if any, and
// removes its files.
func StopSharedCluster() { sharedCluster.stop() }

// StartCluster starts masters*(1+replicasPerMaster) cluster-enabled
// servers in subdirectories of dir, joins them with redis-cli --cluster
// create, and waits until every node reports the cluster ok and every
// replica is linked to its master. On failure it stops what it started.
func StartCluster(dir string, masters, replicasPerMaster int) (*Cluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("a cluster needs at least 3 masters, not %d", masters)
	}
	opts := []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "3000",
		"--repl-diskless-sync-delay", "0",
	}
	c := &Cluster{}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	n := masters * (1 + replicasPerMaster)
	for i := range n {
		s, err := startClusterNode(filepath.Join(dir, fmt.Sprintf("node%d", i)), opts)
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	if err := c.waitFormed(ctx, masters, replicasPerMaster); err != nil {
		return nil, err
	}
	for _, s := range c.Nodes {
		id, err := do(ctx, s, "cluster", "myid").Text()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER MYID on %s: %w", s.Addr, err)
		}
		c.ids = append(c.ids, id)
	}
	ok = true
	return c, nil
}

// startClusterNode starts one node whose files live in dir, on a free
// port, with its cluster bus on another free port (not port+10000, which
// may be taken or out of range).
func startClusterNode(dir string, opts []string) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var errs []error
	for range 3 {
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := Start(dir, append(slices.Clone(opts), "--cluster-port", strconv.Itoa(bus))...)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// waitFormed waits until every node sees the whole cluster, all slots
// served and state ok, and every replica is linked to its master.
func (c *Cluster) waitFormed(ctx context.Context, masters, replicasPerMaster int) error {
	return poll(ctx, "cluster to form", func() error {
		for _, s := range c.Nodes {
			info, err := do(ctx, s, "cluster", "info").Text()
			if err != nil {
				return err
			}
			for _, want := range []string{
				"cluster_state:ok",
				"cluster_slots_ok:16384",
				"cluster_known_nodes:" + strconv.Itoa(len(c.Nodes)),
				"cluster_size:" + strconv.Itoa(masters),
			} {
				if !strings.Contains(info, want+"\r\n") {
					return fmt.Errorf("%s: no %s in CLUSTER INFO", s.Addr, want)
				}
			}
			repl, err := do(ctx, s, "info", "replication").Text()
			if err != nil {
				return err
			}
			switch {
			case strings.Contains(repl, "role:master\r\n"):
				if !strings.Contains(repl, "connected_slaves:"+strconv.Itoa(replicasPerMaster)+"\r\n") {
					return fmt.Errorf("%s: replicas not all connected", s.Addr)
				}
			case !strings.Contains(repl, "master_link_status:up\r\n"):
				return fmt.Errorf("%s: replica not linked", s.Addr)
			}
			// Roles travel by gossip: wait until s knows them all.
			nodes, err := clusterNodes(ctx, s)
			if err != nil {
				return err
			}
			replicas := 0
			for _, n := range nodes {
				if n.master != "" {
					replicas++
				}
			}
			if replicas != masters*replicasPerMaster {
				return fmt.Errorf("%s: knows %d replicas", s.Addr, replicas)
			}
		}
		return nil
	})
}

// Stop stops every node, by pid, and waits for them. It is safe to call
// more than once. (StopSharedCluster also removes the files of the cluster
// SharedCluster started.)
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, s := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Stop()
		}()
	}
	wg.Wait()
}

// Addrs returns the addresses of all nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// Options returns options for a cluster client that knows every node.
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs(), Protocol: 2}
}

// Client returns a new cluster client, closed when t ends. Each call opens
// its own connection pools.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(c.Options())
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
