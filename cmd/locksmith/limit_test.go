//go:build unix

package main_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	library "github.com/locksmith-go/locksmith"
)

// run --limit N holds one of N permits of a semaphore named KEY.
func TestRunLimit(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	hold := func(name string) *proc {
		return start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--limit", "2", "--"},
			script(dir, `touch "$1/`+name+`-holding"; while [ ! -e "$1/`+name+`-finish" ]; do sleep 0.05; done`)...)...)
	}
	a, b := hold("a"), hold("b")
	eventually(t, 20*time.Second, func() bool { return exists(dir+"/a-holding") && exists(dir+"/b-holding") },
		"two holders of two permits did not both start")
	if n := client.ZCard(t.Context(), "locksmith:"+key).Val(); n != 2 {
		t.Fatalf("%d permits held, want 2", n)
	}

	code, stdout, stderr := locksmith(t, nil, "run", "--redis", url, "--key", key, "--limit", "2", "--", "touch", dir+"/third")
	if code != 75 || stdout != "" || !strings.Contains(stderr, "all 2 permits of semaphore") {
		t.Errorf("a third holder: exit %d, stdout %q, stderr %q; want 75, all permits held", code, stdout, stderr)
	}
	if exists(dir + "/third") {
		t.Error("a third command ran beside two holders of two permits")
	}

	// A waiter runs once a holder gives its permit back.
	waiter := start(t, nil, "run", "--redis", url, "--key", key, "--limit", "2", "--wait", "60s", "--", "touch", dir+"/waiter-ran")
	waitSubscribers(t, client, key, 1)
	if exists(dir + "/waiter-ran") {
		t.Fatal("the waiter ran beside two holders of two permits")
	}
	// status shows the holders and the waiting process.
	code, stdout, stderr = locksmith(t, nil, "status", "--redis", url, "--key", key, "--json")
	var st struct {
		Kind    string `json:"kind"`
		Holders []struct {
			Token string `json:"token"`
			TTL   int64  `json:"ttl_ms"`
		} `json:"holders"`
		Listening int `json:"listening"`
		Queued    int `json:"queued"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, stdout %q, stderr %q (%v)", code, stdout, stderr, err)
	}
	if st.Kind != "semaphore" || len(st.Holders) != 2 || st.Holders[0].TTL <= 0 || st.Listening != 1 || st.Queued != 1 {
		t.Errorf("status --json = %+v; want a semaphore with 2 holders, 1 listener and 1 queued waiter", st)
	}
	code, stdout, _ = locksmith(t, nil, "status", "--redis", url, "--key", key)
	if code != 0 || !strings.Contains(stdout, "has 2 permits held:") || !strings.Contains(stdout, "1 process listening") ||
		!strings.Contains(stdout, "1 waiter queued for a permit") {
		t.Errorf("status: exit %d, stdout %q; want the permits and the waiter", code, stdout)
	}
	touch(t, dir+"/a-finish")
	a.expect(t, 0)
	waiter.expect(t, 0)
	if !exists(dir + "/waiter-ran") {
		t.Error("the waiter did not run its command")
	}
	touch(t, dir+"/b-finish")
	b.expect(t, 0)
	if n := client.Exists(t.Context(), "locksmith:"+key).Val(); n != 0 {
		t.Error("permits left behind")
	}
}

// A permit taken away while COMMAND runs stops it, as a lost lock does.
func TestRunLimitPermitLost(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	p := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--limit", "3", "--ttl", "3s", "--"},
		script(dir, `trap 'echo TERM > "$1/got-term"; exit 143' TERM
			touch "$1/started"
			while :; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return exists(dir + "/started") }, "the command did not start")
	if err := client.Del(t.Context(), "locksmith:"+key).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return exists(dir + "/got-term") }, "the command got no SIGTERM")
	p.expect(t, 79)
	if errOut := p.errOut(t); !strings.Contains(errOut, "lost permit of semaphore") {
		t.Errorf("stderr %q does not say the permit was lost", errOut)
	}
}

func TestRunLimitUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--limit", "-1"},
		{"--limit", "2", "--once"},
	} {
		code, _, stderr := locksmith(t, nil, append(append([]string{"run", "--redis", "redis://127.0.0.1:1", "--key", "k"}, args...), "--", "true")...)
		if code != 64 {
			t.Errorf("%q: exit %d, stderr %q; want 64", args, code, stderr)
		}
	}
}

// waitSubscribers waits until n connections listen for the releases of
// key (under the command's default prefix), as a waiting run does.
func waitSubscribers(t *testing.T, client *redis.Client, key string, n int64) {
	t.Helper()
	l := library.New(client, library.WithPrefix("locksmith:"))
	defer l.Close()
	names, err := l.Keys(key)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() bool {
		got, err := client.PubSubNumSub(t.Context(), names.Channel).Result()
		return err == nil && got[names.Channel] >= n
	}, "%d subscribers to %q", n, names.Channel)
}

func TestStatusReadWriteLock(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key := uniqueKey(t)
	l := library.New(client, library.WithPrefix("locksmith:"))
	defer l.Close()
	r, err := l.RWMutex(key).ObtainRead(t.Context(), library.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(t.Context())
	code, stdout, stderr := locksmith(t, nil, "status", "--redis", url, "--key", key, "--json")
	var st struct {
		Kind    string `json:"kind"`
		Readers []struct {
			Mark string `json:"token_mark"`
		} `json:"readers"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, stdout %q, stderr %q (%v)", code, stdout, stderr, err)
	}
	if st.Kind != "rwlock" || len(st.Readers) != 1 || st.Readers[0].Mark != mark(r.Token()) {
		t.Errorf("status --json = %+v; want a read-write lock with reader %q", st, r.Token())
	}
	code, stdout, _ = locksmith(t, nil, "status", "--redis", url, "--key", key)
	if code != 0 || !strings.Contains(stdout, "is held by 1 reader(s):") {
		t.Errorf("status: exit %d, stdout %q; want the reader", code, stdout)
	}
}

// release --force deletes only locks: a semaphore's key is left alone,
// with an error that says why.
func TestReleaseRefusesSemaphore(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key := uniqueKey(t)
	l := library.New(client, library.WithPrefix("locksmith:"))
	defer l.Close()
	p, err := l.Semaphore(key, 2).Acquire(t.Context(), library.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := locksmith(t, nil, "release", "--redis", url, "--key", key, "--force")
	if code == 0 || stdout != "" || !strings.Contains(stderr, "semaphore or a read-write lock") {
		t.Errorf("release --force on a semaphore: exit %d, stdout %q, stderr %q; want a refusal", code, stdout, stderr)
	}
	if _, err := p.TTL(t.Context()); err != nil {
		t.Errorf("the permit was touched: %v", err)
	}
	if err := p.Release(t.Context()); err != nil {
		t.Error(err)
	}
}
