package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A server is the private redis-server this benchmark starts: a free
// loopback port, a temporary directory, no persistence.
type server struct {
	addr   string
	dir    string
	cmd    *exec.Cmd
	exited chan error
}

// startServer starts redis-server (the binary at path) and waits until it
// answers. With cpu >= 0 it runs under `taskset -c cpu`. A clusterNode is
// started with cluster mode on, its nodes.conf in its own directory, and
// not yet part of any cluster (see startCluster).
func startServer(ctx context.Context, path string, cpu int, clusterNode bool) (*server, error) {
	dir, err := os.MkdirTemp("", "locksmith-bench-")
	if err != nil {
		return nil, err
	}
	var errs []error
	for range 5 { // another process may take the free port first
		s, err := startOn(ctx, path, dir, cpu, clusterNode)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		os.Remove(filepath.Join(dir, "nodes.conf")) // start the next try afresh
	}
	os.RemoveAll(dir)
	return nil, errors.Join(errs...)
}

func startOn(ctx context.Context, path, dir string, cpu int, clusterNode bool) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
		"--logfile", filepath.Join(dir, "redis.log"),
	}
	if clusterNode {
		// The cluster bus gets a free port of its own: the default,
		// port+10000, may be taken or above 65535 (--cluster-port needs
		// Redis 7.0).
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(bus),
		)
	}
	name := path
	if cpu >= 0 {
		name, args = "taskset", append([]string{"-c", strconv.Itoa(cpu), path}, args...)
	}
	s.cmd = exec.Command(name, args...)
	// Never leave a server behind if the benchmark is killed.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s.exited = make(chan error, 1)
	go func() { s.exited <- s.cmd.Wait() }()
	if err := s.waitReady(ctx); err != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		return nil, fmt.Errorf("redis-server on %s: %w; log: %s", s.addr, err, lastLines(string(log), 3))
	}
	return s, nil
}

func (s *server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	for {
		if c.Ping(ctx).Err() == nil {
			return nil
		}
		select {
		case err := <-s.exited:
			s.exited <- err // stop's wait must still see it
			return fmt.Errorf("exited before answering: %v", err)
		case <-ctx.Done():
			return errors.New("no answer to PING")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// url is the redis:// URL of the server.
func (s *server) url() string { return "redis://" + s.addr + "/0" }

// stop terminates the server, waits for it and removes its directory.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// counters are the server-side totals the benchmark reads from INFO.
type counters struct {
	// reads is total_reads_processed: one per request read from a client
	// socket (one command, one script call, or one pipelined batch).
	reads int64
	// calls is the sum of calls over INFO commandstats; commands that a
	// script runs with redis.call count too.
	calls int64
	// cpu is the server process's CPU time, used_cpu_sys plus
	// used_cpu_user, in µs: the commands, and the sockets, the event loop
	// and whatever else the server did for them.
	cpu int64
	// usec is the sum of usec over INFO commandstats: the time inside the
	// commands alone (a script's own commands count in the script's time
	// and again in their own line, so this over-counts scripts a little).
	usec int64
}

func (c *counters) add(o counters) {
	c.reads += o.reads
	c.calls += o.calls
	c.cpu += o.cpu
	c.usec += o.usec
}

// readCounters takes one INFO snapshot. The INFO call itself shows up as
// one read in its own snapshot and as one call in the next one: see sub.
func readCounters(ctx context.Context, c *redis.Client) (counters, error) {
	info, err := c.Info(ctx, "stats", "cpu", "commandstats").Result()
	if err != nil {
		return counters{}, fmt.Errorf("INFO: %w", err)
	}
	var cs counters
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "total_reads_processed:"):
			cs.reads, err = strconv.ParseInt(strings.TrimPrefix(line, "total_reads_processed:"), 10, 64)
		case strings.HasPrefix(line, "used_cpu_sys:"), strings.HasPrefix(line, "used_cpu_user:"):
			_, v, _ := strings.Cut(line, ":")
			var secs float64
			secs, err = strconv.ParseFloat(v, 64)
			cs.cpu += int64(math.Round(secs * 1e6))
		case strings.HasPrefix(line, "cmdstat_"):
			// cmdstat_set:calls=12,usec=34,...
			_, fields, _ := strings.Cut(line, ":")
			for f := range strings.SplitSeq(fields, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, perr := strconv.ParseInt(v, 10, 64)
					cs.calls += n
					err = errors.Join(err, perr)
				}
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					n, perr := strconv.ParseInt(v, 10, 64)
					cs.usec += n
					err = errors.Join(err, perr)
				}
			}
		}
		if err != nil {
			return counters{}, fmt.Errorf("parse INFO line %q: %w", line, err)
		}
	}
	return cs, nil
}

// sub returns what the clients under test sent between the snapshots a
// and b, less the one read and one call of the INFO that took b and a.
func (b counters) sub(a counters) counters {
	return counters{reads: b.reads - a.reads - 1, calls: b.calls - a.calls - 1, cpu: b.cpu - a.cpu, usec: b.usec - a.usec}
}

// loopbackRTT returns the median time of n PINGs sent one after another
// through a go-redis client, which is what a lock library sees as one round
// trip.
func loopbackRTT(ctx context.Context, c *redis.Client, n int) (time.Duration, error) {
	for range 50 { // open the connection and settle
		if err := c.Ping(ctx).Err(); err != nil {
			return 0, err
		}
	}
	rtts := make([]time.Duration, n)
	for i := range rtts {
		start := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			return 0, err
		}
		rtts[i] = time.Since(start)
	}
	slices.Sort(rtts)
	return rtts[n/2], nil
}

// serverVersion returns redis_version from INFO server.
func serverVersion(ctx context.Context, c *redis.Client) string {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}
