package locksmith

import (
	"strconv"

	"github.com/locksmith-go/locksmith/internal/notify"
)

// Handing a lock over, the way this package does it:
//
// A waiter whose attempt finds the lock taken is also queued for it, in
// the same script call, in a sorted set beside the lock key (its handoff
// queue, in the key's cluster slot). Its entry names its token, the TTL it
// asked for and whether it wants a fencing token. A release does not just
// delete the key: it pops the first live entry and sets the key to that
// entry's token, with its TTL (and the next fencing token), and announces
// the handoff on the release channel. The waiter's Locker hears the
// announcement and returns the lock to the waiter without another round
// trip: the lock passes from one holder to the next in the release's one
// round trip, instead of a release, an announcement and then an attempt
// by every Locker that waits. A release that finds no live entry deletes
// the key and announces that, as before, and the waiters try as described
// in acquire.go.
//
// Each Locker queues the head of its own queue for a key (and any waiter
// whose first attempt raced with others of the same Locker), so the
// handoff queue holds about one entry per Locker and serves the Lockers
// first come, first served; when a Locker's head leaves with the lock, its
// next head queues at once. An entry lapses queueEntryLife after it was
// last renewed (the head renews it after notify.QueueEntryRenew, keeping
// its place), so a Locker that dies while it waits can be handed the lock only
// within that time, and then holds up its successors for one TTL. A waiter that
// gives up withdraws its entry, releasing the lock if it was handed over
// meanwhile.
//
// The validity of a handed-over lock is counted, conservatively, from the
// waiter's first attempt that queued it: the entry that the release
// popped was made or renewed by one of the waiter's attempts, none sent
// before that one, so the handoff, which starts the TTL, came after it.
// (A later attempt would not do: it may reach Redis after a handoff the
// waiter has not heard of yet, when the handed lock has expired and been
// taken by someone else.) When that leaves less than half the TTL, the
// waiter refreshes the lock before returning it. An attempt that finds
// the lock held by another waiter of the same Locker tells that waiter to
// try, which returns the lock to it if it missed the announcement. A
// permit's attempt cannot learn every holder, so it names the waiters of
// its Locker that queued an entry (Notifier.PeersQueued, in
// internal/notify) and learns which of them hold a permit.
//
// On Redis Cluster, scripts that name the queue go to the master of the
// lock's slot through that master's own client, and fall back to scripts
// over the lock key alone (a release without a handoff, an attempt without
// queueing) when the cluster refuses them: while a slot migrates, a
// script naming a key that does not exist (the queue mostly does not) is
// refused with TRYAGAIN (see viaMaster).
//
// Quorums and locks that wait for replicas (WithReplicas) are not queued:
// a handoff could neither reach a majority in one step nor wait for the
// replicas. Their waiters are woken by the announcement of a plain release
// and try, as acquire.go describes.

// queueEntryLife is how long a handoff queue entry lives unless renewed,
// as the notifier, which renews it, counts it (see notify.QueueEntryLife).
const queueEntryLife = notify.QueueEntryLife

// queueEntryLifeMS is queueEntryLife as the acquire script takes it.
var queueEntryLifeMS any = queueEntryLife.Milliseconds()

// queueEntry is a waiter's entry in a handoff queue, as lock_release.lua reads
// it: "<ttl ms> <1 with fencing, else 0> <token>".
func queueEntry(ttlMS int64, fenced bool, token string) string {
	f := " 0 "
	if fenced {
		f = " 1 "
	}
	return strconv.FormatInt(ttlMS, 10) + f + token
}
