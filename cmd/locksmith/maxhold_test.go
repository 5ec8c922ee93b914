//go:build unix

package main_test

import (
	"strings"
	"testing"
	"time"
)

// run --max-hold stops renewing the lock at the cap: COMMAND's process
// group gets SIGTERM while the lock is still held (its TTL is far off),
// locksmith exits 79 and releases the lock at once; with --once the run
// is not recorded. A negative cap is a usage error.
func TestRunMaxHold(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	for _, once := range []bool{false, true} {
		key, dir := uniqueKey(t), t.TempDir()
		args := []string{"run", "--redis", url, "--key", key, "--ttl", "30s", "--max-hold", "1s"}
		if once {
			args = append(args, "--once")
		}
		begun := time.Now()
		p := start(t, nil, append(append(args, "--"),
			script(dir, `trap 'echo TERM > "$1/got-term"; exit 143' TERM
				touch "$1/started"
				while :; do sleep 0.05; done`)...)...)
		eventually(t, 20*time.Second, func() bool { return exists(dir + "/got-term") }, "the command got no SIGTERM")
		if took := time.Since(begun); took < time.Second {
			t.Errorf("SIGTERM %v after the start, before the cap of 1s", took)
		}
		p.expect(t, 79)
		if errOut := p.errOut(t); !strings.Contains(errOut, "maximum time") || !strings.Contains(errOut, "SIGTERM") {
			t.Errorf("stderr %q does not say the cap was reached", errOut)
		}
		if n := client.Exists(t.Context(), "locksmith:"+key).Val(); n != 0 {
			t.Error("the capped lock was left to its TTL of 30s")
		}
		if once && completion(t, client, key) != nil {
			t.Error("run --once recorded a run stopped at the cap")
		}
	}
	code, _, stderr := locksmith(t, nil, "run", "--redis", url, "--key", uniqueKey(t), "--max-hold", "-1s", "--", "true")
	if code != 64 || !strings.Contains(stderr, "--max-hold") {
		t.Errorf("--max-hold -1s: exit %d, stderr %q; want 64 and why", code, stderr)
	}
}

// elect --max-hold ends each term at the cap: the command gets SIGTERM,
// and with --exit-with-command locksmith exits 79.
func TestElectMaxHold(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	name, dir := uniqueKey(t), t.TempDir()
	p := elect(t, url, name, "a", dir, termTrap, "--ttl", "30s", "--max-hold", "1s", "--exit-with-command")
	waitTerms(t, dir, 1)
	p.expect(t, 79)
	if !exists(dir + "/got-term") {
		t.Error("the command got no SIGTERM")
	}
	if n := client.Exists(t.Context(), "locksmith:"+name).Val(); n != 0 {
		t.Error("the capped term was left to its TTL of 30s")
	}
}
