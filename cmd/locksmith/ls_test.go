//go:build unix

package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	library "github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// lsOutput is what ls --json prints.
type lsOutput struct {
	Prefix string `json:"prefix"`
	Locks  []struct {
		Key       string `json:"key"`
		RedisKey  string `json:"redis_key"`
		Kind      string `json:"kind"`
		Holder    string `json:"holder"`
		Holders   int    `json:"holders"`
		Mode      string `json:"mode"`
		TTLMillis int64  `json:"ttl_ms"`
		Fence     int64  `json:"fence"`
		Waiters   int    `json:"waiters"`
		SetSize   int    `json:"set_size"`
		Mark      string `json:"token_mark"`
	} `json:"locks"`
	Complete bool `json:"complete"`
}

func lsJSON(t *testing.T, url string, flags ...string) (lsOutput, string) {
	t.Helper()
	code, stdout, stderr := locksmith(t, nil, append([]string{"ls", "--redis", url, "--json"}, flags...)...)
	if code != 0 {
		t.Fatalf("ls --json %q: exit %d, stderr %q", flags, code, stderr)
	}
	var out lsOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("ls --json printed %q: %v", stdout, err)
	}
	return out, stdout + stderr
}

// ls lists the locks, elections, semaphores and read-write locks held
// under the prefix, sorted by key, with their holders' values but never
// their tokens; the keys kept beside them, the locks no longer held and
// those under other prefixes are not listed.
func TestLs(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	ctx := t.Context()
	prefix := fmt.Sprintf("lstest%d:", time.Now().UnixNano())
	locker := library.New(client, library.WithPrefix(prefix), library.WithTTL(time.Minute))
	t.Cleanup(func() { _ = locker.Close() })
	var tokens []string
	held := func(lk *library.Lock, err error) *library.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, lk.Token())
		return lk
	}

	lock := held(locker.Obtain(ctx, "a-lock", library.WithFencing()))
	term, err := locker.Election("b-election").Campaign(ctx, "db1:4242")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = term.Resign(ctx) })
	tokens = append(tokens, term.Token())
	sem := locker.Semaphore("c-semaphore", 3)
	held(sem.Acquire(ctx))
	held(sem.Acquire(ctx))
	rw := locker.RWMutex("d-readers")
	held(rw.ObtainRead(ctx))
	held(rw.ObtainRead(ctx))
	held(locker.RWMutex("e-writer").ObtainWrite(ctx))
	// Not held: a job done (its record remains), a fenced lock released
	// (its fence counter remains), and a lock under another prefix.
	if _, err := locker.Once(ctx, "f-done", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	released := held(locker.Obtain(ctx, "g-released", library.WithFencing()))
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held(locker.Obtain(ctx, "h-elsewhere", library.WithPrefix("other"+prefix)))

	out, all := lsJSON(t, url, "--prefix", prefix)
	var keys []string
	for _, l := range out.Locks {
		keys = append(keys, l.Key)
		if l.RedisKey != prefix+l.Key || l.TTLMillis <= 0 || l.TTLMillis > 60000 {
			t.Errorf("%s: redis_key %q, ttl_ms %d; want %q and at most a minute", l.Key, l.RedisKey, l.TTLMillis, prefix+l.Key)
		}
	}
	if want := []string{"a-lock", "b-election", "c-semaphore", "d-readers", "e-writer"}; !slices.Equal(keys, want) {
		t.Fatalf("ls listed %q, want %q", keys, want)
	}
	if !out.Complete || out.Prefix != prefix {
		t.Errorf("prefix %q, complete %t; want %q, true", out.Prefix, out.Complete, prefix)
	}
	for i, want := range []struct {
		kind, holder string
		holders      int
		mode         string
		fenced       bool
	}{
		{"lock", "", 1, "", true},
		{"election", "db1:4242", 1, "", true},
		{"semaphore", "", 2, "", false},
		{"rwlock", "", 2, "read", false},
		{"rwlock", "", 1, "write", false},
	} {
		l := out.Locks[i]
		if l.Kind != want.kind || l.Holder != want.holder || l.Holders != want.holders || l.Mode != want.mode ||
			(l.Fence > 0) != want.fenced {
			t.Errorf("%s: %+v, want %+v", l.Key, l, want)
		}
	}
	if out.Locks[0].Fence != lock.Fence() || out.Locks[1].Fence != term.Fence() {
		t.Errorf("fences %d and %d, want the lock's %d and the term's %d",
			out.Locks[0].Fence, out.Locks[1].Fence, lock.Fence(), term.Fence())
	}

	code, table, stderr := locksmith(t, nil, "ls", "--redis", url, "--prefix", prefix)
	rows := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if code != 0 || stderr != "" || len(rows) != 6 || !strings.HasPrefix(rows[0], "KEY ") {
		t.Fatalf("ls: exit %d, stderr %q, stdout\n%s\nwant 0, a header and 5 rows", code, stderr, table)
	}
	for i, want := range [][]string{
		{"a-lock", "lock", "1"},
		{"b-election", "election", "1", `"db1:4242"`},
		{"c-semaphore", "semaphore", "2"},
		{"d-readers", "rwlock", "2 read"},
		{"e-writer", "rwlock", "1 write"},
	} {
		if row := rows[i+1]; !strings.HasPrefix(row, want[0]+" ") || !containsAll(row, want[1:]) {
			t.Errorf("row %q, want %q", row, want)
		}
	}
	all += table
	for _, token := range tokens {
		if strings.Contains(all, token) {
			t.Errorf("the token %q was printed:\n%s", token, all)
		}
	}

	limited, limitedAll := lsJSON(t, url, "--prefix", prefix, "--limit", "2")
	if len(limited.Locks) != 2 || limited.Locks[0].Key != "a-lock" || limited.Locks[1].Key != "b-election" ||
		limited.Complete || !strings.Contains(limitedAll, "incomplete") {
		t.Errorf("ls --limit 2: %+v, output %q; want a-lock and b-election, incomplete, and a note on stderr", limited, limitedAll)
	}
	if none, _ := lsJSON(t, url, "--prefix", prefix+"nothing:"); len(none.Locks) != 0 || !none.Complete {
		t.Errorf("ls under an empty prefix: %+v, want no locks", none)
	}
}

// ls skips a key that is neither a string nor a sorted set, and exits 69
// for a sorted set locksmith did not write (neither a semaphore's nor a
// read-write lock's), as status does.
func TestLsForeignKeys(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	ctx := t.Context()
	prefix := fmt.Sprintf("lsforeign%d:", time.Now().UnixNano())
	if err := client.HSet(ctx, prefix+"a-hash", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if out, _ := lsJSON(t, url, "--prefix", prefix); len(out.Locks) != 0 || !out.Complete {
		t.Errorf("ls with a hash under the prefix: %+v, want nothing listed", out)
	}
	if err := client.ZAdd(ctx, prefix+"b-zset", redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "x:y"}).Err(); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := locksmith(t, nil, "ls", "--redis", url, "--prefix", prefix)
	if code != 69 || !strings.Contains(stderr, "b-zset") {
		t.Errorf("ls with a foreign sorted set: exit %d, stderr %q; want 69, naming the key", code, stderr)
	}
	code, _, _ = locksmith(t, nil, "status", "--redis", url, "--prefix", prefix, "--key", "b-zset")
	if code != 69 {
		t.Errorf("status of a foreign sorted set: exit %d, want 69", code)
	}
}

// containsAll reports whether s contains each of subs.
func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// On Redis Cluster, ls scans every master, and status --watch hears the
// releases announced with SPUBLISH on the key's shard.
func TestClusterLsAndWatch(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	url := "redis://" + cluster.Nodes[0].Addr + "?addr=" + cluster.Nodes[1].Addr
	ctx := t.Context()
	prefix := fmt.Sprintf("lscluster%d:", time.Now().UnixNano())
	client := cluster.Client(t)

	// Three locks on three masters.
	var keys []string
	var masters []*redistest.Server
	for i := 0; len(keys) < 3; i++ {
		if i == 1000 {
			t.Fatalf("no 3 keys on different masters among 1000 candidates")
		}
		key := fmt.Sprintf("k%d", i)
		owner, err := cluster.KeyOwner(ctx, prefix+key)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(masters, owner) {
			keys, masters = append(keys, key), append(masters, owner)
		}
	}
	locker := library.New(client, library.WithPrefix(prefix), library.WithTTL(time.Minute))
	t.Cleanup(func() { _ = locker.Close() })
	var locks []*library.Lock
	for _, key := range keys {
		lk, err := locker.Obtain(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lk)
	}

	out, all := lsJSON(t, url, "--cluster", "--prefix", prefix)
	var listed []string
	for _, l := range out.Locks {
		listed = append(listed, l.Key)
	}
	if slices.Sort(keys); !slices.Equal(listed, keys) || !out.Complete {
		t.Errorf("ls --cluster listed %q (complete %t), want %q", listed, out.Complete, keys)
	}
	for _, lk := range locks {
		if strings.Contains(all, lk.Token()) {
			t.Errorf("the token %q was printed:\n%s", lk.Token(), all)
		}
	}

	w := start(t, nil, "status", "--cluster", "--redis", url, "--prefix", prefix, "--key", locks[0].Key(),
		"--watch", "--json", "--interval", "1h")
	if l := waitLines(t, w, 1, "held"); !l.Held {
		t.Fatalf("first line %+v, want held", l)
	}
	if err := locks[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := waitLines(t, w, 2, "released"); l.Held {
		t.Fatalf("second line %+v, want free", l)
	}
	stop(t, w)
}
