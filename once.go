package locksmith

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith/internal/keyslot"
)

// DefaultDoneTTL is how long Once keeps a completion record when no
// WithDoneTTL option is given.
const DefaultDoneTTL = 24 * time.Hour

// WithDoneTTL sets how long Once keeps the record that a job completed, and
// so how long it refuses to run the same key again. It must be at least
// 1ms; sub-millisecond parts are dropped. The default is DefaultDoneTTL,
// 24 hours. Only Once uses the value, but every call checks it: an
// invalid WithDoneTTL given to Obtain, WithLock, Completed or Inspect makes
// that call return an error matching ErrInvalidArgument, and given to New
// it makes every call on the Locker do so.
func WithDoneTTL(d time.Duration) Option {
	return Option{kind: optDoneTTL, d: d}
}

// A Completion is the record Once keeps of a job that completed.
type Completion struct {
	// At is when the job completed, by the clock of the process that ran
	// it, in UTC.
	At time.Time
	// By names the process that ran the job: its host name and process
	// id, as "host:pid".
	By string
	// Token is the token of the lock the job ran under (see Lock.Token).
	Token string
	// Fence is the fencing token of that lock (see WithFencing), or 0
	// when it was obtained without fencing.
	Fence int64
}

// completionRecord is how a Completion is stored in Redis, as JSON.
type completionRecord struct {
	CompletedAt time.Time `json:"completed_at"`
	By          string    `json:"by"`
	Token       string    `json:"token"`
	Fence       int64     `json:"fence,omitempty"`
}

// processIdentity returns "host:pid" for this process.
var processIdentity = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
})

// errAlreadyDone stops Once's function when the record turns up after the
// lock was obtained; Once does not return it.
var errAlreadyDone = errors.New("locksmith: already done")

// Once runs fn under the lock on key, as WithLock does, unless the job
// that key names has already completed. It is for work that must happen
// once per key, such as the report for one day, when several servers run
// the same schedule or a scheduler may fire twice.
//
// Once first looks for the key's completion record, in one read, and if
// there is one it returns (false, nil) without taking the lock. Otherwise
// it obtains the lock (following the options, retry strategy included),
// looks for the record again, since a holder it waited for may just have
// completed the job, and runs fn with a lease context, as WithLock does.
// When fn returns nil, one script writes the record and deletes the lock,
// only if the lock is still held, so there is no moment when the lock is
// free and the record missing. The record is kept for the retention set by
// WithDoneTTL (DefaultDoneTTL, 24 hours, by default); once it has expired,
// the job runs again on the next call.
//
// ran reports whether this call ran fn. The job is done and recorded only
// when err is nil; ran then tells whether this call did it or an earlier
// one did.
//
// When someone else holds the lock and the retry strategy gives up (the
// default, NoRetry, gives up at once), Once returns an error matching
// ErrNotObtained, without running fn, as WithLock does: the holder may
// still fail. Wait with WithRetry to learn how the holder fared; a waiter
// that obtains the lock after the job completed finds the record and
// returns (false, nil). If ctx ends before the lock is obtained, the error
// matches both ErrNotObtained and ctx.Err().
//
// No record is written, and the lock is released as WithLock releases it
// (within the same time bounds, and with its error joined in the same way),
// when fn returns an error (Once returns it), when fn panics (the panic is
// passed on after the release), or when the lock was lost before the
// record could be written: then the error matches ErrLockLost, even if fn
// returned nil, because the job may have run concurrently elsewhere. A
// later call runs the job again, so fn must stop when its context is done,
// and should be safe to repeat. Any other error means Redis could not
// answer; if the final script failed that way, the record may or may not
// have been written, which Completed tells.
//
// The record lives at Keys(key).Done, beside the lock and in its Redis
// Cluster slot.
func (l *Locker) Once(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) (ran bool, err error) {
	if l.tracing() {
		return l.onceTraced(ctx, key, fn, opts)
	}
	ran, _, err = l.onceObserved(ctx, key, fn, opts)
	return ran, err
}

// onceTraced is Once in a span.
func (l *Locker) onceTraced(ctx context.Context, key string, fn func(ctx context.Context) error, opts []Option) (ran bool, err error) {
	ctx, s := l.span(ctx, Call{Op: OpOnce, Key: key, Prefix: l.prefixOf(opts)})
	panicked := true
	failed := false
	defer func() {
		o := Outcome{Err: err, Class: callClass(err, failed), Panicked: panicked}
		if !panicked {
			o.Once = onceResultOf(ran, err)
		}
		s.end(o)
	}()
	ran, failed, err = l.onceObserved(ctx, key, fn, opts)
	panicked = false
	return ran, err
}

// onceObserved is Once, reported to the observer if there is one; failed
// says whether fn returned an error.
func (l *Locker) onceObserved(ctx context.Context, key string, fn func(ctx context.Context) error, opts []Option) (ran, failed bool, err error) {
	ran, failed, err = l.once(ctx, key, fn, opts)
	if l.obs != nil {
		l.onceResult(key, opts, ran, failed, err)
	}
	return ran, failed, err
}

// once is Once; failed says whether fn returned an error.
func (l *Locker) once(ctx context.Context, key string, fn func(ctx context.Context) error, opts []Option) (ran, failed bool, err error) {
	if fn == nil {
		return false, false, fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	cfg, st, doneKey, err := l.onceConfig(key, opts)
	if err != nil {
		return false, false, err
	}
	if ctx.Err() != nil {
		return false, false, notObtained(ctx, key)
	}
	if err := l.verify(ctx, &cfg, key, needOnce); err != nil {
		return false, false, err
	}
	if _, done, err := st.record(ctx, doneKey); err != nil {
		if ctx.Err() != nil {
			return false, false, notObtained(ctx, key)
		}
		return false, false, fmt.Errorf("locksmith: read completion record of %q: %w", key, err)
	} else if done {
		return false, false, nil
	}
	_, err = l.withLock(ctx, key, &cfg, func(ctx context.Context) error {
		if _, done, err := st.record(ctx, doneKey); err != nil {
			return fmt.Errorf("locksmith: read completion record of %q: %w", key, err)
		} else if done {
			return errAlreadyDone
		}
		ran = true
		err := fn(ctx)
		failed = err != nil
		return err
	}, func(ctx context.Context, lk *Lock) error {
		record, err := json.Marshal(completionRecord{
			CompletedAt: time.Now().UTC(),
			By:          processIdentity(),
			Token:       lk.Token(),
			Fence:       lk.Fence(),
		})
		if err != nil {
			return err
		}
		return lk.complete(ctx, st, doneKey, string(record), cfg.doneTTL)
	})
	if errors.Is(err, errAlreadyDone) {
		// Whatever happened to the lock since, the job is done.
		return false, false, nil
	}
	return ran, failed, err
}

// Completed returns the completion record Once keeps for key, for status pages
// and operators. ok is false when there is none: the job has not completed,
// or its record has expired. The options are checked as for Once, but only
// the prefix matters. Completed sends one GET.
//
// An error means Redis could not answer, or the key holds something Once
// did not write; Once takes any value there as a record.
func (l *Locker) Completed(ctx context.Context, key string, opts ...Option) (c Completion, ok bool, err error) {
	_, st, doneKey, err := l.onceConfig(key, opts)
	if err != nil {
		return Completion{}, false, err
	}
	value, ok, err := st.record(ctx, doneKey)
	if err != nil {
		return Completion{}, false, fmt.Errorf("locksmith: read completion record of %q: %w", key, err)
	}
	if !ok {
		return Completion{}, false, nil
	}
	c, err = decodeCompletion(value)
	if err != nil {
		return Completion{}, false, fmt.Errorf("locksmith: completion record of %q at %q is not one Once wrote: %w", key, doneKey, err)
	}
	return c, true, nil
}

// onceConfig resolves the options for a call of Once or Completed on key, and
// returns the store and the key of the completion record.
func (l *Locker) onceConfig(key string, opts []Option) (config, onceStore, string, error) {
	cfg, err := l.callConfigFor(key, opts, callOnce)
	if err != nil {
		return config{}, nil, "", err
	}
	return cfg, l.extras, keyslot.Companion(cfg.prefix, key, keyslot.Done), nil
}

// complete ends a lock whose job completed, as Release does, but with one
// script that writes the completion record and deletes the lock, only if
// the lock is still held. It returns an error matching ErrNotHeld, having
// written nothing, when the lock had expired or been taken.
func (lk *Lock) complete(ctx context.Context, st onceStore, doneKey, record string, retention time.Duration) error {
	return lk.finish(ctx, "record completion of", func(ctx context.Context, lk *Lock) (bool, error) {
		return st.complete(ctx, lk.ref, doneKey, record, retention)
	})
}

// A onceStore is a store that keeps completion records for Once. A record
// lives in the same cluster slot as its lock.
type onceStore interface {
	// record returns the value of the record at doneKey, if there is one.
	record(ctx context.Context, doneKey string) (value string, ok bool, err error)
	// complete sets doneKey to record with the retention, deletes ref's
	// lock and announces the release to waiters, in one step, if the lock
	// holds ref's token; it reports whether it did. A resent call whose
	// first delivery did it reports true.
	complete(ctx context.Context, ref lockRef, doneKey, record string, retention time.Duration) (bool, error)
}

var _ onceStore = redisStore{}

func (s redisStore) record(ctx context.Context, doneKey string) (string, bool, error) {
	v, err := s.client.Get(ctx, doneKey).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	return v, err == nil, err
}

func (s redisStore) complete(ctx context.Context, ref lockRef, doneKey, record string, retention time.Duration) (bool, error) {
	res, err := completeLua.run(ctx, s.client, []any{nil, nil, 2, ref.key, doneKey, ref.token, record,
		retention.Milliseconds(), ref.channel, s.publish()}).Int64()
	return res == 1, err
}
