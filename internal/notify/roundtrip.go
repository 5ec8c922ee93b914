package notify

import "time"

// The round-trip estimate: how long a Locker defers to its rivals after
// its own release (see keyQueue.ours).

// Observe folds the duration of one attempt into the round-trip
// estimate. The estimate follows the fastest attempts (it drops to any
// faster one, and rises only slowly) because slow ones measure a busy
// process or server, not the network, and a deferral that grows with them
// would delay every handoff. It takes no lock.
func (n *Notifier) Observe(d time.Duration) {
	old := n.rtt.Load()
	if old == 0 || int64(d) < old {
		n.rtt.Store(int64(d))
		return
	}
	n.rtt.Store(old + (int64(d)-old)/64)
}

// roundTrip returns how long a Locker defers to its rivals after its own
// release: about one round trip, within bounds.
func (n *Notifier) roundTrip() time.Duration {
	return min(max(time.Duration(n.rtt.Load()), 50*time.Microsecond), 5*time.Millisecond)
}
