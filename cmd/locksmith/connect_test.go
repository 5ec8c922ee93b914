//go:build unix

package main_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// runHolding starts locksmith run with env and args (flags, no --key) on
// key, with a COMMAND that writes its token to dir/KEY.token and then waits
// for dir/KEY.proceed; it returns the process and the token, once
// written.
func runHolding(t *testing.T, env []string, dir, key string, args ...string) (*proc, string) {
	t.Helper()
	name := filepath.Join(dir, strings.ReplaceAll(key, "/", "_"))
	args = append(append([]string{"run"}, args...), "--key", key, "--")
	p := start(t, env, append(args, script(name, `echo "$LOCKSMITH_TOKEN" > "$1.token"
		while [ ! -e "$1.proceed" ]; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return p.exited() || strings.HasSuffix(readFile(t, name+".token"), "\n") },
		"the command under %q did not start", key)
	if p.exited() {
		t.Fatalf("locksmith %q exited with %d before its command started; stderr: %s", p.cmd.Args[1:], p.code, p.errOut(t))
	}
	return p, strings.TrimSpace(readFile(t, name+".token"))
}

// proceed lets the command that runHolding started for key exit.
func proceed(t *testing.T, dir, key string) {
	t.Helper()
	touch(t, filepath.Join(dir, strings.ReplaceAll(key, "/", "_"))+".proceed")
}

// statusWith runs locksmith status --json with the connection flags
// args on key and returns what it printed.
func statusWith(t *testing.T, key string, args ...string) statusJSON {
	t.Helper()
	code, stdout, stderr := locksmith(t, nil, append(append([]string{"status"}, args...), "--key", key, "--json")...)
	if code != 0 {
		t.Fatalf("status %q: exit %d, stderr %q", args, code, stderr)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("status --json printed %q: %v", stdout, err)
	}
	return st
}

// clusterKeys returns n lock keys whose Redis keys (with the default
// prefix) are served by n different masters of c, and those masters.
func clusterKeys(t *testing.T, c *redistest.Cluster, n int) ([]string, []*redistest.Server) {
	t.Helper()
	var (
		keys    []string
		masters []*redistest.Server
	)
	base := uniqueKey(t)
	for i := 0; len(keys) < n; i++ {
		if i == 1000 {
			t.Fatalf("no %d keys on different masters among 1000 candidates; found %q", n, keys)
		}
		key := fmt.Sprintf("%s:%d", base, i)
		owner, err := c.KeyOwner(t.Context(), "locksmith:"+key)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(masters, owner) {
			keys, masters = append(keys, key), append(masters, owner)
		}
	}
	return keys, masters
}

// With --cluster, run and status work on keys that live on different
// masters, given the URL of one node and a spare.
func TestClusterRunAndStatus(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	url := "redis://" + cluster.Nodes[0].Addr + "?addr=" + cluster.Nodes[1].Addr
	keys, masters := clusterKeys(t, cluster, 3)
	dir := t.TempDir()
	ctx := t.Context()

	procs := make([]*proc, len(keys))
	for i, key := range keys {
		var token string
		procs[i], token = runHolding(t, nil, dir, key, "--cluster", "--redis", url)
		// On the master that serves its slot, and nowhere else.
		if got, err := masters[i].Client(t).Get(ctx, "locksmith:"+key).Result(); err != nil || got != token {
			t.Errorf("GET locksmith:%s on its master %s = %q, %v; want the token %q", key, masters[i].Addr, got, err, token)
		}
		if st := statusWith(t, key, "--cluster", "--redis", url); !st.Held || st.Mark != mark(token) {
			t.Errorf("status --cluster of %q while run holds it: %+v; want held by %q", key, st, token)
		}
	}
	for i, key := range keys {
		proceed(t, dir, key)
		procs[i].expect(t, 0)
		if st := statusWith(t, key, "--cluster", "--redis", url); st.Held {
			t.Errorf("status --cluster of %q after run exited: %+v; want free", key, st)
		}
		if n := cluster.Client(t).Exists(ctx, "locksmith:"+key).Val(); n != 0 {
			t.Errorf("locksmith:%s is still there after run exited", key)
		}
	}

	// Without --cluster the node named by the URL redirects to the others.
	for i, key := range keys {
		if masters[i] == cluster.Nodes[0] {
			continue
		}
		code, _, stderr := locksmith(t, nil, "status", "--redis", "redis://"+cluster.Nodes[0].Addr, "--key", key)
		if code != 69 || !strings.Contains(stderr, "MOVED") {
			t.Errorf("status without --cluster of %q, on another node: exit %d, stderr %q; want 69 and MOVED", key, code, stderr)
		}
		break
	}
}

// A URL with master_name has the sentinels find the master, for run and
// status alike.
func TestSentinelRunAndStatus(t *testing.T) {
	t.Parallel()
	sentinel := redistest.SharedSentinel(t)
	url := fmt.Sprintf("redis://%s?master_name=%s&addr=%s&addr=%s",
		sentinel.Addrs[0], redistest.SentinelMaster, sentinel.Addrs[1], sentinel.Addrs[2])
	ctx := t.Context()
	key := uniqueKey(t)
	dir := t.TempDir()

	p, token := runHolding(t, nil, dir, key, "--redis", url)
	master, err := sentinel.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := master.Client(t).Get(ctx, "locksmith:"+key).Result(); err != nil || got != token {
		t.Errorf("GET locksmith:%s on the master %s = %q, %v; want the token %q", key, master.Addr, got, err, token)
	}
	if st := statusWith(t, key, "--redis", url); !st.Held || st.Mark != mark(token) {
		t.Errorf("status through the sentinels while run holds the lock: %+v; want held by %q", st, token)
	}
	code, stdout, stderr := locksmith(t, nil, "status", "--redis", url, "--key", key, "--show-token")
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("is held by token %q", token)) {
		t.Errorf("status: exit %d, stdout %q, stderr %q; want 0 and the token", code, stdout, stderr)
	}
	proceed(t, dir, key)
	p.expect(t, 0)
	if st := statusWith(t, key, "--redis", url); st.Held {
		t.Errorf("status through the sentinels after run exited: %+v; want free", st)
	}
}

func TestConnectUsageErrors(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "ran")
	for _, tc := range []struct {
		url     string
		cluster bool
		want    string // in stderr
	}{
		{"redis://127.0.0.1:1?master_name=m", true, "--cluster and master_name both given"},
		{"redis://127.0.0.1:1?addr=127.0.0.1:2", false, "give --cluster if they are Redis Cluster nodes, or master_name"},
		{"unix:///tmp/redis.sock", true, "a unix:// URL names one server"},
		{"unix:///tmp/redis.sock?master_name=m", false, "a unix:// URL names one server"},
		{"redis://127.0.0.1:1/3", true, "a Redis Cluster has database 0 only"},
		{"redis://127.0.0.1:1?master_name=", false, "master_name is empty"},
		{"redis://127.0.0.1:1?dial_timeout=3s", false, "dial_timeout is set by --dial-timeout"},
		{"redis://127.0.0.1:1?read_timeout=3s", true, "read_timeout is set by --timeout"},
		{"redis://127.0.0.1:1?master_name=m&max_retries=9", false, "max_retries is set by locksmith"},
		{"redis://127.0.0.1:1?master_name=m&bogus=1", false, "unexpected option: bogus"},
		{"redis://127.0.0.1:1?bogus=1", true, "unexpected option: bogus"},
	} {
		for _, cmd := range [][]string{{"status"}, {"run", "--", "touch", marker}} {
			args := []string{cmd[0], "--redis", tc.url, "--key", "k"}
			if tc.cluster {
				args = append(args, "--cluster")
			}
			args = append(args, cmd[1:]...)
			code, _, stderr := locksmith(t, nil, args...)
			if code != 64 || !strings.Contains(stderr, tc.want) {
				t.Errorf("locksmith %q: exit %d, stderr %q; want 64 and %q", args, code, stderr, tc.want)
			}
		}
	}
	if exists(marker) {
		t.Error("a command ran despite a usage error")
	}
}

// No password in a Cluster or Sentinel URL appears in the output: neither
// the sentinels' (in the user info) nor the master's (the password
// parameter), whether it is used or the deployment is unreachable.
func TestSecretsNeverPrintedDeployments(t *testing.T) {
	t.Parallel()
	sentinelPW := fmt.Sprintf("s3ntinel-%d", time.Now().UnixNano())
	masterPW := fmt.Sprintf("m4ster-%d/:@", time.Now().UnixNano())
	escaped := strings.NewReplacer("/", "%2F", ":", "%3A", "@", "%40").Replace(masterPW)
	sentinel := redistest.SharedSentinel(t)
	closed := closedPort(t)
	for _, tc := range []struct {
		name    string
		url     string
		cluster bool
		want    int
	}{
		// The deployment needs no passwords; go-redis ignores their refusal.
		{"sentinel, passwords not needed", fmt.Sprintf("redis://:%s@%s?master_name=%s&password=%s",
			sentinelPW, sentinel.Addrs[0], redistest.SentinelMaster, escaped), false, 0},
		{"sentinel unreachable", fmt.Sprintf("redis://:%s@%s?master_name=m&password=%s", sentinelPW, closed, escaped), false, 69},
		{"sentinel, bad option", fmt.Sprintf("redis://:%s@%s?master_name=m&password=%s&db=x", sentinelPW, closed, escaped), false, 64},
		{"cluster unreachable", fmt.Sprintf("redis://:%s@%s?addr=%s", sentinelPW, closed, closed), true, 69},
		{"cluster unparsable", fmt.Sprintf("redis://:%s/x@%s", sentinelPW, closed), true, 64},
	} {
		for _, cmd := range [][]string{{"status"}, {"run", "--", "true"}} {
			args := []string{cmd[0], "--redis", tc.url, "--key", uniqueKey(t), "--dial-timeout", "1s"}
			if tc.cluster {
				args = append(args, "--cluster")
			}
			args = append(args, cmd[1:]...)
			code, stdout, stderr := locksmith(t, nil, args...)
			if code != tc.want {
				t.Errorf("%s: locksmith %s: exit %d, want %d; stderr %q", tc.name, cmd[0], code, tc.want, stderr)
			}
			for _, s := range []string{sentinelPW, masterPW, escaped} {
				if strings.Contains(stdout+stderr, s) {
					t.Errorf("%s: locksmith %s: the password %q appears in the output:\nstdout: %s\nstderr: %s",
						tc.name, cmd[0], s, stdout, stderr)
				}
			}
			if testing.Verbose() && stderr != "" {
				t.Logf("%s: %s", tc.name, strings.TrimSpace(stderr))
			}
		}
	}
}

// deadlineFor returns a generous bound on how long locksmith may take to
// give up on a connection with --dial-timeout d, on a noisy machine.
func deadlineFor(d time.Duration) time.Duration { return 3*d + time.Second }

// requireDialFailure runs status and run against url with env and the dial
// timeout, and checks that each exits 69 within deadlineFor(dialTimeout)
// with every text of want in its stderr.
func requireDialFailure(t *testing.T, name string, env []string, url string, dialTimeout time.Duration, want []string) {
	t.Helper()
	for _, cmd := range [][]string{{"status"}, {"run", "--", "true"}} {
		args := append([]string{cmd[0], "--redis", url, "--key", uniqueKey(t),
			"--dial-timeout", dialTimeout.String(), "--timeout", "1s"}, cmd[1:]...)
		began := time.Now()
		code, _, stderr := locksmith(t, env, args...)
		took := time.Since(began)
		if code != 69 {
			t.Errorf("%s: locksmith %s: exit %d, want 69; stderr %q", name, cmd[0], code, stderr)
		}
		if took > deadlineFor(dialTimeout) {
			t.Errorf("%s: locksmith %s took %v to give up, want under %v", name, cmd[0], took, deadlineFor(dialTimeout))
		}
		for _, w := range want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: locksmith %s: stderr %q, want %q in it", name, cmd[0], stderr, w)
			}
		}
	}
}

// rediss:// to a server without TLS fails within the dial timeout, rather
// than after go-redis's retries, and says why; so does a refused
// connection.
func TestDialFailures(t *testing.T) {
	t.Parallel()
	plain := redistest.New(t)
	closed := closedPort(t)
	const dialTimeout = time.Second
	for _, tc := range []struct {
		name string
		url  string
		want []string // in stderr
	}{
		{"rediss to a plain server", "rediss://" + plain.Addr, []string{
			"TLS handshake with " + plain.Addr + " did not complete within 1s",
			"is the server serving TLS? rediss:// expects TLS, redis:// is plain",
		}},
		{"refused", "redis://" + closed, []string{"connection to " + closed + " refused"}},
		{"rediss refused", "rediss://" + closed, []string{"connection to " + closed + " refused"}},
	} {
		requireDialFailure(t, tc.name, nil, tc.url, dialTimeout, tc.want)
	}
	// The plain server was not harmed by the ClientHello it got.
	if code, _, stderr := locksmith(t, nil, "status", "--redis", "redis://"+plain.Addr, "--key", uniqueKey(t)); code != 0 {
		t.Errorf("status over redis:// after the failed rediss://: exit %d, stderr %q", code, stderr)
	}
}

// The help tells how to name a Cluster and a Sentinel master.
func TestHelpConnect(t *testing.T) {
	t.Parallel()
	_, overview, _ := locksmith(t, nil, "help")
	for _, want := range []string{"--cluster", "?addr=HOST2:PORT2", "master_name=NAME", "password parameter is the master's", "--dial-timeout bounds"} {
		if !strings.Contains(overview, want) {
			t.Errorf("locksmith help: %q missing from\n%s", want, overview)
		}
	}
	for _, cmd := range []string{"run", "status", "release", "ls"} {
		if _, text, _ := locksmith(t, nil, "help", cmd); !strings.Contains(text, "--cluster\n") {
			t.Errorf("locksmith help %s: no --cluster flag in\n%s", cmd, text)
		}
	}
}
