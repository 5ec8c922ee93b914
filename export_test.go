package locksmith

// Hooks that let the external tests wait on state they cannot see from
// outside.

// QueuedWaiters returns how many of l's Obtain calls wait in its queue for
// the key whose release channel is channel.
func QueuedWaiters(l *Locker, channel string) int {
	n := l.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	if q := n.keys[channel]; q != nil {
		return len(q.waiters)
	}
	return 0
}
