package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
)

// Bounds of ls.
const (
	defaultLsLimit = 1000
	// scanCount is the COUNT of each SCAN, and maxScans the most SCAN
	// calls ls makes on each server (each master of a Redis Cluster): it
	// looks at no more than about maxScans*scanCount names there.
	scanCount = 1000
	maxScans  = 100
)

// lsFlags are the flags of the ls command.
type lsFlags struct {
	connFlags // no key: ls lists them
	limit     int
	json      bool
}

func lsFlagSet(f *lsFlags) *flag.FlagSet {
	set := newFlagSet("ls")
	f.connFlags.registerRedis(set)
	set.IntVar(&f.limit, "limit", defaultLsLimit, "list at most `N` locks, the first by key")
	set.BoolVar(&f.json, "json", false, "print one JSON object rather than a table")
	return set
}

func (f *lsFlags) check() error {
	if err := f.connFlags.checkRedis(); err != nil {
		return err
	}
	if f.limit < 1 {
		return fmt.Errorf("--limit %d is under 1", f.limit)
	}
	return nil
}

// lsEntry is one lock that ls lists. It never holds a token.
type lsEntry struct {
	Key      string `json:"key"`       // without the prefix
	RedisKey string `json:"redis_key"` // prefix + key
	// Kind is lock, election, semaphore or rwlock.
	Kind string `json:"kind"`
	// Holder is the value of an election's leader; absent for the other
	// kinds, whose holders are known only by their tokens (and a set's
	// by Mark).
	Holder string `json:"holder,omitempty"`
	// Holders counts the holds: 1 for a lock or an election, the permits
	// of a semaphore, the readers (or the writer) of a read-write lock.
	Holders int `json:"holders"`
	// Mode is read or write, for a read-write lock.
	Mode string `json:"mode,omitempty"`
	// TTLMillis is the time left of the hold that expires first, in
	// milliseconds; -1 for a lock key without expiry.
	TTLMillis int64 `json:"ttl_ms"`
	// Fence is the last fencing token issued for the key; absent when
	// none was.
	Fence int64 `json:"fence,omitempty"`
	// Waiters counts the waiters: queued for a lock, an election or a
	// semaphore's permit, writers waiting for a read-write lock.
	Waiters int `json:"waiters,omitempty"`
	// SetSize is the number of keys of the set whose holder holds this
	// key as part of it (run --key A --key B), and Mark the mark of the
	// set's token (see tokenMark): the keys with the same Mark are one
	// set. Both are absent for a key not held as part of a set.
	SetSize int    `json:"set_size,omitempty"`
	Mark    string `json:"token_mark,omitempty"`
}

// lsJSON is what ls --json prints.
type lsJSON struct {
	Prefix string    `json:"prefix"`
	Locks  []lsEntry `json:"locks"`
	// Complete is false when there may be more locks than listed: the
	// --limit was reached, or the SCAN calls were, before the end.
	Complete bool `json:"complete"`
}

// ls implements "locksmith ls".
func (u *ui) ls(args []string) int {
	var f lsFlags
	set := lsFlagSet(&f)
	if code, ok := u.parseFlags(set, "ls", args); !ok {
		return code
	}
	if err := f.check(); err != nil {
		return u.usageError("ls", err)
	}
	if set.NArg() > 0 {
		return u.usageError("ls", fmt.Errorf("unexpected argument %q", set.Arg(0)))
	}
	client, addr, err := u.connect(&f.connFlags)
	if err != nil {
		return u.usageError("ls", err)
	}
	defer client.Close()
	locker := locksmith.New(client, locksmith.WithPrefix(f.prefix))
	defer locker.Close()
	if _, err := locker.Keys("k"); err != nil {
		return u.usageError("ls", errors.New(errText(err))) // the prefix is refused
	}

	ctx := context.Background()
	names, scanned, err := scanNames(ctx, client, globEscape(f.prefix)+"*")
	if err != nil {
		u.errorf("cannot list the keys under %q in Redis at %s: %s", f.prefix, addr, errText(err))
		return exitRedis
	}
	out := lsJSON{Prefix: f.prefix, Locks: []lsEntry{}, Complete: scanned}
	for _, name := range names {
		key := strings.TrimPrefix(name, f.prefix)
		if key == "" || strings.HasPrefix(key, "~") {
			continue // a companion (see Locker.Keys), or no lock's key
		}
		if len(out.Locks) == f.limit {
			out.Complete = false
			break
		}
		e, ok, err := lsRead(ctx, locker, f.prefix, key)
		if err != nil {
			u.errorf("cannot read %q from Redis at %s: %s", name, addr, errText(err))
			return exitRedis
		}
		if ok {
			out.Locks = append(out.Locks, e)
		}
	}
	if f.json {
		b, err := json.Marshal(out)
		if err != nil {
			panic(err) // lsJSON always marshals
		}
		fmt.Fprintf(u.stdout, "%s\n", b)
	} else {
		u.printLocks(out.Locks)
	}
	if !out.Complete {
		u.errorf("the list may be incomplete: it stops at --limit %d, and reads at most %d names a server with SCAN",
			f.limit, maxScans*scanCount)
	}
	return exitOK
}

// scanner is what scanNames needs of a client.
type scanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
}

// scanNames returns the names of the keys that match pattern, sorted,
// from every master of a Redis Cluster or from the one server, with at
// most maxScans SCAN calls on each. complete is false if a server had
// more to scan when they were used up.
func scanNames(ctx context.Context, client redis.UniversalClient, pattern string) (names []string, complete bool, err error) {
	cluster, ok := client.(*redis.ClusterClient)
	if !ok {
		names, complete, err = scanServer(ctx, client, pattern)
	} else {
		var mu sync.Mutex // guards names and complete
		complete = true
		err = cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			found, all, err := scanServer(ctx, node, pattern)
			mu.Lock()
			defer mu.Unlock()
			names, complete = append(names, found...), complete && all
			return err
		})
	}
	if err != nil {
		return nil, false, err
	}
	slices.Sort(names)
	// SCAN may return a name twice (and a slot moving between masters
	// may show it on both).
	return slices.Compact(names), complete, nil
}

// scanServer scans one server, as scanNames says.
func scanServer(ctx context.Context, c scanner, pattern string) (names []string, complete bool, err error) {
	var cursor uint64
	for range maxScans {
		var keys []string
		keys, cursor, err = c.Scan(ctx, cursor, pattern, scanCount).Result()
		if err != nil {
			return nil, false, err
		}
		names = append(names, keys...)
		if cursor == 0 {
			return names, true, nil
		}
	}
	return names, false, nil
}

// globEscape escapes the characters that a SCAN MATCH pattern gives a
// meaning to, so that the pattern matches s itself.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// lsRead reads the lock at key under prefix for ls, and reports false for
// one that nobody holds (released since the scan, or a semaphore or a
// read-write lock whose holds all expired) and for a key that holds
// something else than a lock.
func lsRead(ctx context.Context, locker *locksmith.Locker, prefix, key string) (lsEntry, bool, error) {
	st, err := readState(ctx, locker, prefix, key)
	if redis.HasErrorPrefix(err, "WRONGTYPE") {
		return lsEntry{}, false, nil // neither a lock nor a sorted set
	}
	if err != nil {
		return lsEntry{}, false, err
	}
	e := lsEntry{Key: key, RedisKey: prefix + key}
	switch st := st.(type) {
	case lockState:
		if !st.Held {
			return lsEntry{}, false, nil
		}
		e.Kind, e.Holders, e.TTLMillis, e.Fence, e.Waiters = "lock", 1, *st.TTLMillis, st.Fence, st.Queued
		if st.SetSize > 0 {
			e.SetSize, e.Mark = st.SetSize, st.Mark
		}
		// A candidate's token is a UUID, a space and its value (see
		// Locker.Election): the lock is an election's.
		if strings.Contains(st.Token, " ") {
			l, err := locker.Election(key).Leader(ctx)
			switch {
			case errors.Is(err, locksmith.ErrNoLeader):
				return lsEntry{}, false, nil
			case err != nil:
				return lsEntry{}, false, err
			}
			e.Kind, e.Holder, e.TTLMillis, e.Fence = "election", l.Value, l.TTL.Milliseconds(), l.Fence
			if l.TTL < 0 {
				e.TTLMillis = -1
			}
		}
	case semaphoreState:
		if len(st.Holders) == 0 {
			return lsEntry{}, false, nil
		}
		e.Kind, e.Holders, e.TTLMillis, e.Fence, e.Waiters = "semaphore", len(st.Holders), st.Holders[0].TTLMillis, st.Fence, st.Queued
	case rwState:
		holds, mode := st.Readers, "read"
		if st.Writer != nil {
			holds, mode = []permitState{*st.Writer}, "write"
		}
		if len(holds) == 0 {
			return lsEntry{}, false, nil
		}
		e.Kind, e.Holders, e.Mode, e.TTLMillis, e.Fence, e.Waiters = "rwlock", len(holds), mode, holds[0].TTLMillis, st.Fence, st.WaitingWriters
	}
	return e, true, nil
}

// printLocks prints the locks as a table, a line each.
func (u *ui) printLocks(locks []lsEntry) {
	w := tabwriter.NewWriter(u.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tKIND\tHOLDERS\tHOLDER\tTTL\tFENCE\tWAITERS")
	for _, e := range locks {
		holders := strconv.Itoa(e.Holders)
		if e.Mode != "" {
			holders += " " + e.Mode
		}
		holder, ttl, fence, waiters := "-", "none", "-", strconv.Itoa(e.Waiters)
		switch {
		case e.Holder != "":
			holder = strconv.Quote(e.Holder)
		case e.SetSize > 0:
			holder = fmt.Sprintf("#%s (set of %d)", e.Mark, e.SetSize)
		}
		if e.TTLMillis >= 0 {
			ttl = (time.Duration(e.TTLMillis) * time.Millisecond).String()
		}
		if e.Fence != 0 {
			fence = strconv.FormatInt(e.Fence, 10)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(e.Key), e.Kind, holders, holder, ttl, fence, waiters)
	}
	_ = w.Flush()
}

// cell returns s for a table cell: as it is, or quoted if it is empty or
// has a space or a character that is not printable.
func cell(s string) string {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
