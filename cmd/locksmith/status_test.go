//go:build unix

package main_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	library "github.com/locksmith-go/locksmith"
)

// statusJSON is what status --json prints.
type statusJSON struct {
	Key       string `json:"key"`
	RedisKey  string `json:"redis_key"`
	Held      bool   `json:"held"`
	Token     string `json:"token"`      // with --show-token only
	Mark      string `json:"token_mark"` // mark(Token)
	SetSize   int    `json:"set_size"`
	TTLMillis *int64 `json:"ttl_ms"`
	Fence     int64  `json:"fence"`
	Queued    int    `json:"queued"`
	Done      *struct {
		CompletedAt time.Time `json:"completed_at"`
		By          string    `json:"by"`
		Token       string    `json:"token"`
		Mark        string    `json:"token_mark"`
	} `json:"done"`
}

// mark is the mark status prints of a token: the first five bytes of its
// SHA-256, in hex.
func mark(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:5])
}

func status(t *testing.T, url, key string, flags ...string) statusJSON {
	t.Helper()
	code, stdout, stderr := locksmith(t, nil, append([]string{"status", "--redis", url, "--key", key, "--json"}, flags...)...)
	if code != 0 {
		t.Fatalf("status --json: exit %d, stderr %q", code, stderr)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("status --json printed %q: %v", stdout, err)
	}
	if st.Key != key || st.RedisKey != "locksmith:"+key {
		t.Errorf("status --json: key %q, redis_key %q; want %q, %q", st.Key, st.RedisKey, key, "locksmith:"+key)
	}
	return st
}

func TestStatus(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	ctx := t.Context()

	t.Run("free", func(t *testing.T) {
		key := uniqueKey(t)
		if st := status(t, url, key); st.Held || st.Token != "" || st.Mark != "" || st.TTLMillis != nil || st.Fence != 0 || st.Done != nil {
			t.Errorf("free lock: %+v, want held false and no token, ttl_ms, fence or done", st)
		}
		code, stdout, _ := locksmith(t, nil, "status", "--redis", url, "--key", key)
		if code != 0 || !strings.HasSuffix(stdout, "is free\n") {
			t.Errorf("status: exit %d, stdout %q; want 0 and free", code, stdout)
		}
	})

	t.Run("held", func(t *testing.T) {
		key := uniqueKey(t)
		client.Set(ctx, "locksmith:"+key, "tok-123", time.Minute)
		st := status(t, url, key)
		if !st.Held || st.Token != "" || st.Mark != mark("tok-123") || st.TTLMillis == nil || *st.TTLMillis <= 0 || *st.TTLMillis > 60000 {
			t.Errorf("held lock: %+v, want held by tok-123 (its mark, no token) with ttl_ms in (0, 60000]", st)
		}
		code, stdout, _ := locksmith(t, nil, "status", "--redis", url, "--key", key)
		if code != 0 || !strings.Contains(stdout, "is held by token #"+mark("tok-123")) || !strings.Contains(stdout, "s left") {
			t.Errorf("status: exit %d, stdout %q; want 0, the token's mark and the time left", code, stdout)
		}
		if st := status(t, url, key, "--show-token"); st.Token != "tok-123" || st.Mark != mark("tok-123") {
			t.Errorf("status --show-token: %+v, want the token tok-123 and its mark", st)
		}
		code, stdout, _ = locksmith(t, nil, "status", "--redis", url, "--key", key, "--show-token")
		if code != 0 || !strings.Contains(stdout, `is held by token "tok-123"`) {
			t.Errorf("status --show-token: exit %d, stdout %q; want 0 and the token", code, stdout)
		}
	})

	t.Run("no expiry", func(t *testing.T) {
		key := uniqueKey(t)
		client.Set(ctx, "locksmith:"+key, "forever", 0)
		t.Cleanup(func() { client.Del(ctx, "locksmith:"+key) })
		if st := status(t, url, key); !st.Held || st.TTLMillis == nil || *st.TTLMillis != -1 {
			t.Errorf("lock without expiry: %+v, want held with ttl_ms -1", st)
		}
	})

	t.Run("held by run", func(t *testing.T) {
		key, dir := uniqueKey(t), t.TempDir()
		p := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--ttl", "10s", "--"},
			script(dir, `echo "$LOCKSMITH_TOKEN" > "$1/token"; while [ ! -e "$1/proceed" ]; do sleep 0.05; done`)...)...)
		eventually(t, 20*time.Second, func() bool { return strings.HasSuffix(readFile(t, dir+"/token"), "\n") },
			"the command did not start")
		st := status(t, url, key)
		if want := strings.TrimSpace(readFile(t, dir+"/token")); !st.Held || st.Mark != mark(want) || *st.TTLMillis > 10000 {
			t.Errorf("status of a run's lock: %+v, want held by %q with at most 10s left", st, want)
		}
		touch(t, dir+"/proceed")
		p.expect(t, 0)
		if st := status(t, url, key); st.Held {
			t.Errorf("status after the run: %+v, want free", st)
		}
	})

	t.Run("Redis down", func(t *testing.T) {
		code, stdout, stderr := locksmith(t, nil, "status", "--redis", "redis://"+closedPort(t), "--key", "k", "--json")
		if code != 69 || stdout != "" || !strings.Contains(stderr, "connection refused") {
			t.Errorf("exit %d, stdout %q, stderr %q; want 69, nothing on stdout, a connection error", code, stdout, stderr)
		}
	})
}

func TestReleaseForce(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	rkey := "locksmith:" + key
	client.Set(ctx, rkey, "tok-456", time.Minute)

	code, stdout, stderr := locksmith(t, nil, "release", "--redis", url, "--key", key)
	if code != 64 || stdout != "" || !strings.Contains(stderr, "--force") {
		t.Errorf("release without --force: exit %d, stdout %q, stderr %q; want 64 and a hint", code, stdout, stderr)
	}
	if client.Exists(ctx, rkey).Val() != 1 {
		t.Fatal("release without --force deleted the lock")
	}

	code, stdout, stderr = locksmith(t, nil, "release", "--redis", url, "--key", key, "--force")
	if code != 0 || !strings.Contains(stdout, "deleted") || !strings.Contains(stdout, "#"+mark("tok-456")) || strings.Contains(stdout, "tok-456") || !strings.Contains(stdout, rkey) {
		t.Errorf("release --force: exit %d, stdout %q, stderr %q; want 0 and what was deleted", code, stdout, stderr)
	}
	if client.Exists(ctx, rkey).Val() != 0 {
		t.Error("release --force left the lock")
	}

	code, stdout, _ = locksmith(t, nil, "release", "--redis", url, "--key", key, "--force")
	if code != 0 || !strings.Contains(stdout, "nothing deleted") {
		t.Errorf("release --force of a free lock: exit %d, stdout %q; want 0 and nothing deleted", code, stdout)
	}

	code, _, stderr = locksmith(t, nil, "release", "--redis", "redis://"+closedPort(t), "--key", key, "--force")
	if code != 69 || !strings.Contains(stderr, "connection refused") {
		t.Errorf("release --force, Redis down: exit %d, stderr %q; want 69", code, stderr)
	}
}

// TestStatusShowsNoTokens: a token is the capability to renew or release
// its holder's lock, so status, status --json and status --watch print
// marks of the tokens of every kind of hold (a lock and its record of a
// run --once, a semaphore's permits, a read-write lock's reader and
// writer) and the tokens themselves only with --show-token.
func TestStatusShowsNoTokens(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	ctx := t.Context()
	locker := library.New(client, library.WithPrefix("locksmith:"), library.WithTTL(time.Minute))
	t.Cleanup(func() { _ = locker.Close() })

	lockKey, semKey, readKey, writeKey := uniqueKey(t), uniqueKey(t), uniqueKey(t), uniqueKey(t)
	var tokens []string
	hold := func(token string, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, token)
	}
	// A lock whose key also has the record of a job done under an
	// earlier lock.
	done := make(chan string, 1)
	if _, err := locker.Once(ctx, lockKey, func(ctx context.Context) error {
		done <- library.LockFromContext(ctx).Token()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	hold(<-done, nil)
	lk, err := locker.Obtain(ctx, lockKey)
	hold(lk.Token(), err)
	sem := locker.Semaphore(semKey, 2)
	p1, err := sem.Acquire(ctx)
	hold(p1.Token(), err)
	p2, err := sem.Acquire(ctx)
	hold(p2.Token(), err)
	r, err := locker.RWMutex(readKey).ObtainRead(ctx)
	hold(r.Token(), err)
	w, err := locker.RWMutex(writeKey).ObtainWrite(ctx)
	hold(w.Token(), err)

	for _, key := range []string{lockKey, semKey, readKey, writeKey} {
		for _, format := range [][]string{nil, {"--json"}} {
			args := append([]string{"status", "--redis", url, "--key", key}, format...)
			code, stdout, stderr := locksmith(t, nil, args...)
			if code != 0 {
				t.Fatalf("%q: exit %d, stderr %q", args, code, stderr)
			}
			_, shown, _ := locksmith(t, nil, append(args, "--show-token")...)
			w := watchStatus(t, url, key, format...)
			eventually(t, 20*time.Second, func() bool { return strings.Contains(w.out(t), "\n") },
				"status --watch %q printed no line; stderr %q", format, w.errOut(t))
			stop(t, w)
			watchedOut := w.out(t)
			for _, token := range tokens {
				for what, out := range map[string]string{"status": stdout, "status --watch": watchedOut} {
					if strings.Contains(out, token) {
						t.Errorf("%s %q printed the token %q: %q", what, args, token, out)
					}
				}
			}
			var marks, full int
			for _, token := range tokens {
				if strings.Contains(stdout, mark(token)) && strings.Contains(watchedOut, mark(token)) {
					marks++
				}
				if strings.Contains(shown, token) {
					full++
				}
			}
			if want := map[string]int{lockKey: 2, semKey: 2, readKey: 1, writeKey: 1}[key]; marks != want || full != want {
				t.Errorf("%q: %d marks (with --watch too) and, with --show-token, %d tokens; want %d of each:\n%s\n%s",
					args, marks, full, want, stdout, shown)
			}
		}
	}
}
