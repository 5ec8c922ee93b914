package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A topology is the kind of Redis deployment a library row runs on.
type topology int

const (
	mainServer     topology = iota // the main server: private, or -redis URL
	quorumServers                  // deploySize independent private servers
	clusterServers                 // a private Redis Cluster of deploySize masters
)

func (t topology) String() string {
	switch t {
	case mainServer:
		return "main server"
	case quorumServers:
		return "quorum"
	case clusterServers:
		return "cluster"
	}
	return "topology " + strconv.Itoa(int(t))
}

// deploySize is the number of servers of the quorum and of the cluster.
const deploySize = 3

// clusterTimeout bounds redis-cli --cluster create and the wait for every
// node to report the cluster ok.
const clusterTimeout = 30 * time.Second

// A deployment is the Redis a library row runs against: one server or
// several. The harness reaches each server through an admin client of its
// own, for FLUSHALL and INFO only, never in the measured traffic, and sums
// the INFO counters over the servers.
type deployment struct {
	desc    string          // what and where it is, for the header
	urls    []string        // redis:// URL of each server
	admins  []*redis.Client // one per server, in the order of urls
	servers []*server       // the servers this program started; stop stops them
}

// newDeployment makes the deployment of the servers at urls, which takes
// over servers (those of them this program started). On error it stops
// them.
func newDeployment(desc string, urls []string, servers []*server) (*deployment, error) {
	d := &deployment{desc: desc, urls: urls, servers: servers}
	for _, u := range urls {
		opt, err := redis.ParseURL(u)
		if err != nil {
			d.stop()
			return nil, err
		}
		d.admins = append(d.admins, redis.NewClient(opt))
	}
	return d, nil
}

// url returns the URL of the first server: the only one of the main
// server.
func (d *deployment) url() string { return d.urls[0] }

// flushAll deletes every key on every server.
func (d *deployment) flushAll(ctx context.Context) error {
	for _, a := range d.admins {
		if err := a.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("FLUSHALL on %s: %w", a.Options().Addr, err)
		}
	}
	return nil
}

// A snapshot holds the INFO counters of each server of a deployment.
type snapshot []counters

func (d *deployment) snapshot(ctx context.Context) (snapshot, error) {
	snap := make(snapshot, len(d.admins))
	for i, a := range d.admins {
		cs, err := readCounters(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.Options().Addr, err)
		}
		snap[i] = cs
	}
	return snap, nil
}

// sub returns what the clients under test sent to the deployment between
// the snapshots a and b: counters.sub summed over its servers. It is zero
// when a snapshot is missing (the run then has an error).
func (b snapshot) sub(a snapshot) counters {
	var sum counters
	if len(a) != len(b) {
		return sum
	}
	for i := range b {
		sum.add(b[i].sub(a[i]))
	}
	return sum
}

// stop closes the admin clients and stops the servers this program
// started, all at once.
func (d *deployment) stop() {
	for _, a := range d.admins {
		_ = a.Close()
	}
	var wg sync.WaitGroup
	for _, s := range d.servers {
		wg.Go(s.stop)
	}
	wg.Wait()
}

// deployments are those of one run, by topology.
type deployments map[topology]*deployment

// stop stops every deployment.
func (ds deployments) stop() {
	for _, d := range ds {
		d.stop()
	}
}

// startFor starts the private deployments that libs need besides the main
// server, with their servers pinned to cpu (unless it is < 0), and adds
// them to ds. It returns libs less the rows that cannot run on this
// machine, and a note for each of those. On error, what it started is in
// ds for ds.stop.
func (ds deployments) startFor(ctx context.Context, libs []lib, serverPath string, cpu int) (kept []lib, skipped []string, err error) {
	for _, l := range libs {
		t := l.runsOn()
		if ds[t] == nil {
			if why := unavailable(ctx, t, serverPath); why != "" {
				skipped = append(skipped, fmt.Sprintf("%s: SKIPPED: %s", l.name(), why))
				continue
			}
			var d *deployment
			switch t {
			case quorumServers:
				d, err = startQuorum(ctx, serverPath, cpu)
			case clusterServers:
				d, err = startCluster(ctx, serverPath, cpu)
			default:
				err = fmt.Errorf("no way to start the %v", t)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("%s: start the %v: %w", l.name(), t, err)
			}
			ds[t] = d
		}
		kept = append(kept, l)
	}
	return kept, skipped, nil
}

// unavailable says why the private deployment t cannot be started here, or
// returns "".
func unavailable(ctx context.Context, t topology, serverPath string) string {
	if _, err := exec.LookPath(serverPath); err != nil {
		return fmt.Sprintf("%s not found, which the private %v needs", serverPath, t)
	}
	if t != clusterServers {
		return ""
	}
	if _, err := findCLI(serverPath); err != nil {
		return "redis-cli not found, next to redis-server or on PATH (it comes with redis-server); the cluster is built with redis-cli --cluster create"
	}
	if v, ok := majorVersion(ctx, serverPath); ok && v < 7 {
		return fmt.Sprintf("redis-server %d.x is older than 7.0, which the cluster needs (--cluster-port)", v)
	}
	return ""
}

// majorVersion returns the major version `redis-server --version` reports,
// if it can tell.
func majorVersion(ctx context.Context, serverPath string) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, serverPath, "--version").Output()
	if err != nil {
		return 0, false
	}
	// Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 ...
	for f := range strings.FieldsSeq(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			major, _, _ := strings.Cut(v, ".")
			n, err := strconv.Atoi(major)
			return n, err == nil
		}
	}
	return 0, false
}

// findCLI returns redis-cli: the one next to the redis-server binary at
// serverPath if there is one, else the one on PATH.
func findCLI(serverPath string) (string, error) {
	if strings.Contains(serverPath, "/") {
		if cli, err := exec.LookPath(filepath.Join(filepath.Dir(serverPath), "redis-cli")); err == nil {
			return cli, nil
		}
	}
	return exec.LookPath("redis-cli")
}

// startQuorum starts deploySize independent servers.
func startQuorum(ctx context.Context, serverPath string, cpu int) (*deployment, error) {
	servers, err := startServers(ctx, serverPath, cpu, false)
	if err != nil {
		return nil, err
	}
	desc := fmt.Sprintf("%d independent private redis-servers (%s), --save \"\" --appendonly no%s",
		len(servers), strings.Join(addrsOf(servers), ", "), pinnedTo(cpu))
	return newDeployment(desc, urlsOf(servers), servers)
}

// startCluster starts deploySize cluster-enabled servers, each in its own
// directory, makes them a cluster of masters without replicas with
// redis-cli --cluster create, and waits until every node reports it ok.
func startCluster(ctx context.Context, serverPath string, cpu int) (*deployment, error) {
	cli, err := findCLI(serverPath)
	if err != nil {
		return nil, err
	}
	servers, err := startServers(ctx, serverPath, cpu, true)
	if err != nil {
		return nil, err
	}
	desc := fmt.Sprintf("private Redis Cluster of %d masters without replicas (%s), --save \"\" --appendonly no, made with redis-cli --cluster create%s",
		len(servers), strings.Join(addrsOf(servers), ", "), pinnedTo(cpu))
	d, err := newDeployment(desc, urlsOf(servers), servers)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrsOf(servers)...)
	args = append(args, "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		d.stop()
		return nil, fmt.Errorf("%s --cluster create: %w: %s", cli, err, lastLines(string(out), 3))
	}
	for {
		err := d.clusterOK(ctx)
		if err == nil {
			return d, nil
		}
		select {
		case <-ctx.Done():
			d.stop()
			return nil, fmt.Errorf("cluster not ready: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// clusterOK checks that every node reports cluster_state:ok and knows
// every other node.
func (d *deployment) clusterOK(ctx context.Context) error {
	for _, a := range d.admins {
		info, err := a.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", a.Options().Addr, err)
		}
		lines := strings.Split(info, "\n")
		for i := range lines {
			lines[i] = strings.TrimSpace(lines[i])
		}
		for _, want := range []string{"cluster_state:ok", "cluster_known_nodes:" + strconv.Itoa(len(d.admins))} {
			if !slices.Contains(lines, want) {
				return fmt.Errorf("%s: no %s in CLUSTER INFO", a.Options().Addr, want)
			}
		}
	}
	return nil
}

// startServers starts deploySize servers, or none.
func startServers(ctx context.Context, serverPath string, cpu int, clusterNode bool) ([]*server, error) {
	var servers []*server
	for range deploySize {
		s, err := startServer(ctx, serverPath, cpu, clusterNode)
		if err != nil {
			for _, s := range servers {
				s.stop()
			}
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}

func addrsOf(servers []*server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.addr
	}
	return addrs
}

func urlsOf(servers []*server) []string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.url()
	}
	return urls
}

func pinnedTo(cpu int) string {
	if cpu < 0 {
		return ", not pinned"
	}
	return fmt.Sprintf(", pinned to CPU %d", cpu)
}
