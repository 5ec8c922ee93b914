package locksmith

import "github.com/redis/go-redis/v9"

// Hooks that let the external tests wait on state they cannot see from
// outside.

// QueuedWaiters returns how many of l's Obtain calls wait in its queue for
// the key whose release channel is channel.
func QueuedWaiters(l *Locker, channel string) int {
	return l.notify.Waiters(channel)
}

// HeardOn returns how many announcements and subscription confirmations
// l's waiters for the key whose release channel is channel have heard,
// and whether any of them is about to try or trying (see
// notify.Notifier.Heard).
func HeardOn(l *Locker, channel string) (events uint64, busy bool) {
	return l.notify.Heard(channel)
}

// NewObservedBuffer is New with observer o, whose events wait in a buffer
// of size, instead of the usual 1024, before they are dropped.
func NewObservedBuffer(client redis.UniversalClient, o Observer, size int, opts ...Option) *Locker {
	l := New(client, append(opts, WithObserver(o))...)
	l.obs.size = size // before the first event, which makes the buffer
	return l
}

// SetRenewAlone makes leases started from now on renew with a goroutine
// each (true), as before renewers, or together (false); for the
// benchmark that compares the two.
func SetRenewAlone(alone bool) { renewAlone.Store(alone) }

// QuorumAskers returns how many goroutines serve each master of l, a
// NewQuorum Locker (see askers); nil for another Locker.
func QuorumAskers(l *Locker) []int {
	q, ok := l.store.(quorumStore)
	if !ok {
		return nil
	}
	a := q.helpers
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int(nil), a.serving...)
}
