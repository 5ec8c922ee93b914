package locksmith

import (
	"context"
	"fmt"
	"strconv"

	"github.com/locksmith-go/locksmith/internal/keyslot"
)

// An RWMutex is a read-write lock shared by every process that uses the
// same key: many readers at once, or one writer. "Rebuild the cache while
// readers keep reading": readers take read holds, the rebuild takes the
// write hold. Each hold is leased like a lock, with its own TTL, and held
// through a *Lock handle with the same methods (Release, Refresh, TTL,
// Deadline, Lease, Token, Fence), so a crashed holder's hold comes back
// when its TTL runs out.
//
// Writers are not starved: a writer that finds readers holding leaves an
// intent that stops new readers from entering, and takes the lock once
// the readers it waited for have left. The intent lives as long as the
// writer waits (renewed by its attempts every two seconds, lapsing five
// seconds after the last, so a writer that dies stops nobody for long).
// When the writer releases, the readers that waited behind it enter
// together: the release is announced, and each Locker's waiting readers
// enter one after another, each at once after the one before, without
// waiting out a retry delay.
//
// The holds live in one Redis sorted set at the lock's key (prefix plus
// key, as for a lock), so a name is either a lock, a semaphore or a
// read-write lock. Each acquisition is decided atomically, in one script,
// by the Redis server's clock. Waiting works as for Obtain (see
// Semaphore): announcements, one attempt per Locker at a time, callers of
// one Locker served in arrival order, and unannounced expiries noticed
// within the retry strategy's delay.
//
// An RWMutex is a small value that holds no state of its own; make one
// with Locker.RWMutex wherever it is needed. Its methods are safe for
// concurrent use.
type RWMutex struct {
	l   *Locker
	key string
}

// RWMutex returns the read-write lock named key. Like New, it never
// fails: an invalid key makes every call on it return an error matching
// ErrInvalidArgument, before sending anything.
func (l *Locker) RWMutex(key string) *RWMutex {
	return &RWMutex{l: l, key: key}
}

// Key returns the lock's key, without the prefix.
func (m *RWMutex) Key() string { return m.key }

// ObtainRead takes a read hold, shared with other readers, and returns its
// handle. It takes the same options as Obtain, except WithReplicas, and
// behaves like it: with the default NoRetry it tries once and fails with
// an error matching ErrNotObtained while a writer holds or waits; with a
// retry strategy it waits. With WithFencing its Fence is larger than that
// of every earlier hold of the lock, read or write: every write hold it
// could have overlapped with, had it been valid, came before it, so a
// resource that fences writers can tell a read that began after a write
// from one that began before it.
func (m *RWMutex) ObtainRead(ctx context.Context, opts ...Option) (*Lock, error) {
	return m.obtain(ctx, opts, readKind{})
}

// ObtainWrite takes the write hold, exclusive of readers and of other
// writers, and returns its handle. It behaves as ObtainRead does; while it
// waits, new readers do not enter. With WithFencing its Fence is larger
// than that of every earlier hold, read or write, so a resource that
// remembers the largest writer's token it has seen can refuse the writes
// of a writer that lost its hold, as for a lock.
func (m *RWMutex) ObtainWrite(ctx context.Context, opts ...Option) (*Lock, error) {
	return m.obtain(ctx, opts, writeKind{})
}

// WithReadLock runs fn under a read hold, as WithLock does under a lock:
// it takes the hold (waiting as the options say), runs fn with a context
// that is cancelled if the hold is lost, renews the hold while fn runs,
// and gives it back when fn returns or panics. It returns fn's error,
// joined with an error matching ErrLockLost when the hold was lost while
// fn ran.
func (m *RWMutex) WithReadLock(ctx context.Context, fn func(ctx context.Context) error, opts ...Option) error {
	return m.with(ctx, fn, opts, readKind{})
}

// WithWriteLock is WithReadLock under the write hold.
func (m *RWMutex) WithWriteLock(ctx context.Context, fn func(ctx context.Context) error, opts ...Option) error {
	return m.with(ctx, fn, opts, writeKind{})
}

func (m *RWMutex) with(ctx context.Context, fn func(ctx context.Context) error, opts []Option, k kind) error {
	if m != nil && m.l.tracing() {
		return m.l.traced(ctx, Call{Op: OpWithLock, Key: m.key, Prefix: m.l.prefixOf(opts), Hold: k.hold()},
			func(ctx context.Context) (bool, error) { return m.withHold(ctx, fn, opts, k) })
	}
	_, err := m.withHold(ctx, fn, opts, k)
	return err
}

// withHold is with, once traced.
func (m *RWMutex) withHold(ctx context.Context, fn func(ctx context.Context) error, opts []Option, k kind) (failed bool, err error) {
	if fn == nil {
		err := fmt.Errorf("%w: nil function", ErrInvalidArgument)
		m.refused(ctx, opts, k, err)
		return false, err
	}
	lk, err := m.obtain(ctx, opts, k)
	if err != nil {
		return false, err
	}
	return runHeld(ctx, lk, fn, nil)
}

func (m *RWMutex) obtain(ctx context.Context, opts []Option, k kind) (*Lock, error) {
	cfg, err := m.config(opts)
	if err != nil {
		m.refused(ctx, opts, k, err)
		return nil, err
	}
	return m.l.acquire(ctx, m.key, &cfg, k)
}

// refused reports a call on m refused for its arguments (see
// Locker.refused).
func (m *RWMutex) refused(ctx context.Context, opts []Option, k kind, err error) {
	if m != nil && m.l != nil {
		m.l.refused(ctx, m.key, opts, k.hold(), err)
	}
}

// config resolves the options of one call on m.
func (m *RWMutex) config(opts []Option) (config, error) {
	if m == nil || m.l == nil {
		return config{}, fmt.Errorf("%w: a zero RWMutex; make one with Locker.RWMutex", ErrInvalidArgument)
	}
	return m.l.callConfigFor(m.key, opts, callRW)
}

// readKind and writeKind are the holds of a read-write lock: shared by
// readers, or held by one writer; never handed over.
type (
	readKind  struct{}
	writeKind struct{}
)

func (readKind) hold() Hold                 { return HoldRead }
func (readKind) needs() need                { return needRW }
func (readKind) shares() bool               { return true }
func (readKind) handle(st stores, lk *Lock) { rwHandle(st, lk, "r:") }
func (readKind) take(ctx context.Context, st stores, lk *Lock, _ acquireMode, _ bool, _ []string) (acquireRes, error) {
	return st.extras.acquireRW(ctx, lk.ref, lk.cfg.ttlMS, false)
}
func (readKind) queues(stores, int) bool { return false }
func (readKind) handoff(stores) handoff  { return nil }
func (readKind) busy(key string) error {
	return fmt.Errorf("%w: %q is held or awaited by a writer", ErrNotObtained, key)
}

func (writeKind) hold() Hold                 { return HoldWrite }
func (writeKind) needs() need                { return needRW }
func (writeKind) shares() bool               { return true }
func (writeKind) handle(st stores, lk *Lock) { rwHandle(st, lk, "w:") }

// take leaves an intent, which stops new readers, only for a writer that
// waits (queue).
func (writeKind) take(ctx context.Context, st stores, lk *Lock, _ acquireMode, queue bool, _ []string) (acquireRes, error) {
	return st.extras.acquireRW(ctx, lk.ref, lk.cfg.ttlMS, queue)
}

// queues: a waiting writer's intent lapses unless its attempts renew it.
func (writeKind) queues(stores, int) bool { return true }
func (writeKind) handoff(stores) handoff  { return nil }
func (writeKind) busy(key string) error {
	return fmt.Errorf("%w: %q is held by readers or another writer", ErrNotObtained, key)
}

// rwHandle completes lk, the handle of a read or write hold, whose member
// of the lock's hash is its token after role ("r:" or "w:").
func rwHandle(st stores, lk *Lock, role string) {
	lk.store = st.extras.rwHandles()
	lk.ref.token = role + lk.token
	if lk.fencing {
		lk.ref.fence = keyslot.Companion(lk.cfg.prefix, lk.key, keyslot.Fence)
	}
}

// An RWStatus is what Redis holds for one read-write lock, as
// RWMutex.Inspect reads it.
type RWStatus struct {
	// Readers are the unexpired read holds, the one that expires first
	// first.
	Readers []PermitHolder
	// Writer is the unexpired write hold, or nil.
	Writer *PermitHolder
	// WaitingWriters counts the writers whose intent stops new readers:
	// about one per Locker with a writer waiting.
	WaitingWriters int
	// Fence is the last fencing token issued for the key (see
	// WithFencing), or 0 when none was.
	Fence int64
}

// Inspect reads the state of the read-write lock, for status pages and
// operators: its readers and writer with their time left, how many
// writers wait, and the last fencing token issued. It changes nothing and
// holds nothing; it reads everything in one step. The options are
// checked as for ObtainRead, but only the prefix matters.
func (m *RWMutex) Inspect(ctx context.Context, opts ...Option) (RWStatus, error) {
	cfg, err := m.config(opts)
	if err != nil {
		return RWStatus{}, err
	}
	k := keysOf(cfg.prefix, m.key)
	raw, err := m.l.extras.inspectRW(ctx, k)
	if err != nil {
		return RWStatus{}, fmt.Errorf("locksmith: inspect read-write lock %q: %w", m.key, err)
	}
	st := RWStatus{Readers: raw.readers, Writer: raw.writer, WaitingWriters: int(raw.intents)}
	if raw.hasFence {
		st.Fence, err = strconv.ParseInt(raw.fence, 10, 64)
		if err != nil {
			return RWStatus{}, fmt.Errorf("locksmith: fence counter of %q at %q is not one WithFencing wrote: %w", m.key, k.Fence, err)
		}
	}
	return st, nil
}
