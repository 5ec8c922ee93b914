package notify

import "errors"

// The states of a connection, as the dispatcher reports them to the
// Notifier's onConn.

// A ConnState is the state of a pub/sub connection in a ConnEvent: what
// the root package reports as its ConnState, of the same names and
// meanings (see locksmith.ConnState). ConnUp is reported once per
// connection, ConnDown once per outage however many connections fail in
// it, ConnReplaced when a connection is dialed in place of one that
// failed or whose slot moved, ConnClosed when one closes.
type ConnState uint8

// The states of a connection.
const (
	ConnUp ConnState = iota + 1
	ConnDown
	ConnReplaced
	ConnClosed
)

// A ConnEvent is a change of a pub/sub connection's state.
type ConnEvent struct {
	// Node is the address of the Redis Cluster master the connection
	// talks to ("" when not on a cluster).
	Node string
	// State is the connection's new state.
	State ConnState
	// Attempts is, for ConnUp and ConnReplaced, how many connections
	// were dialed since the last one that came up (1 for a connection
	// that came up at once); 0 otherwise.
	Attempts int
	// Err is why, for ConnDown and ConnReplaced.
	Err error
}

// Why a pub/sub connection was replaced, besides its own errors.
var (
	errSlotMoved = errors.New("locksmith: the server dropped a sharded subscription: its slot moved")
	errNoPong    = errors.New("locksmith: no reply to PING on the pub/sub connection")
)

// connEvents follows the state of one dispatcher's connection, and
// reports its changes (see ConnState). It belongs to the dispatcher's
// goroutine.
type connEvents struct {
	n     *Notifier
	node  string
	up    bool // the current connection was heard from
	down  bool // a failure was reported and no connection came up since
	dials int  // connections dialed since the last that came up
}

func (c *connEvents) report(s ConnState, err error) {
	if c.n.onConn == nil || (s != ConnClosed && c.n.closed.Load()) {
		// (Closing the Notifier breaks its connections: that is no
		// failure.)
		return
	}
	attempts := 0
	if s == ConnUp || s == ConnReplaced {
		attempts = c.dials
	}
	c.n.onConn(ConnEvent{Node: c.node, State: s, Attempts: attempts, Err: err})
}

// dialed records that the first connection was dialed.
func (c *connEvents) dialed() { c.dials++ }

// heard records that the server answered on the connection.
func (c *connEvents) heard() {
	if !c.up {
		c.up, c.down = true, false
		c.report(ConnUp, nil)
		c.dials = 0
	}
}

// failed records that the connection failed with err.
func (c *connEvents) failed(err error) {
	c.up = false
	if !c.down {
		c.down = true
		c.report(ConnDown, err)
	}
}

// replaced records that a new connection was dialed in place of the
// last, because of err.
func (c *connEvents) replaced(err error) {
	c.up = false
	c.dials++
	c.report(ConnReplaced, err)
}
