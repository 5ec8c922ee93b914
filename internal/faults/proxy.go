//go:build linux

package faults

import (
	"bytes"
	"errors"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A Direction is one way through a Proxy.
type Direction int

const (
	// ToServer carries requests, from the clients to the server.
	ToServer Direction = iota
	// ToClient carries replies, from the server to the clients.
	ToClient
)

func (d Direction) String() string {
	if d == ToServer {
		return "to-server"
	}
	return "to-client"
}

// A Proxy forwards TCP connections from a loopback address to a target,
// and misbehaves on request: it delays the bytes going one way, holds
// them back (a blackhole, or piece by piece until a test lets each go),
// or resets connections. Every change takes
// effect at once, on the connections already open and on new ones.
//
// Each connection costs four goroutines (a reader and a writer each way),
// plus one that accepts; all of them stop when the connection ends, and
// Close ends every connection and waits for them. A Proxy is safe for
// concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup  // every goroutine of the proxy
	held   [2]atomic.Int64 // by direction: chunks read and not yet written on or dropped

	mu     sync.Mutex // guards the fields below
	delay  [2]time.Duration
	healed chan struct{}        // closed while no blackhole is on
	links  map[*link]struct{}   // the open connections
	trip   *trip                // an armed ResetAfterRequest, or nil
	hold   [2]func([]byte) bool // by direction: which pieces Hold holds back, or nil
	gates  [2][]chan struct{}   // by direction: the gate of each piece Hold held, in order
	closed bool
}

// A link is one client connection and its connection to the target.
type link struct {
	client, server *net.TCPConn
	done           chan struct{} // closed when the link is torn down
	once           sync.Once

	// tripped is the trip whose request went out on this link; guarded
	// by the Proxy's mu.
	tripped *trip
}

// A trip is an armed ResetAfterRequest.
type trip struct {
	match []byte
	fired chan struct{}
}

// chunk is a piece of the byte stream read one way, and when it may be
// written on: after at, and, if gate is not nil, once gate is closed.
type chunk struct {
	data []byte
	at   time.Time
	gate chan struct{}
}

// NewProxy starts a proxy to target (host:port) on a free loopback port.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, healed: make(chan struct{}), links: make(map[*link]struct{})}
	close(p.healed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address, for clients to dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay delays every byte going in direction dir by d (zero for none)
// from when the proxy reads it. Bytes already read keep their delay.
func (p *Proxy) SetDelay(dir Direction, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay[dir] = d
}

// Blackhole stops (on) or resumes (off) forwarding, both ways. While it is
// on, connections stay open and new ones are accepted, but no byte goes
// through: what the proxy reads is held back, as TCP would keep
// retransmitting it through a partition, and delivered when the blackhole
// ends (unless the connection is reset first).
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.healed:
		if on {
			p.healed = make(chan struct{})
		}
	default:
		if !on {
			close(p.healed)
		}
	}
}

// Hold starts holding back, one by one, the pieces of the byte streams
// read in direction dir for which which returns true (nil stops): each
// such piece waits, with what comes after it on its connection, until
// Release lets it go. The pieces held are numbered 1, 2, 3, ... in the
// order the proxy reads them, over the Proxy's life; stopping leaves the
// pieces already held waiting.
//
// A piece is what one read returned: a reply or a pub/sub message when the
// client waits for each, though the kernel may join or split them.
func (p *Proxy) Hold(dir Direction, which func(piece []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold[dir] = which
}

// All is a Hold that holds back every piece.
func All([]byte) bool { return true }

// HeldBack returns how many pieces Hold has held back in direction dir so
// far, released or not: the number of the last one.
func (p *Proxy) HeldBack(dir Direction) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.gates[dir])
}

// Release lets piece n (numbered from 1) that Hold held back in direction
// dir go on, after any delay it has and once no blackhole is on. It is a
// no-op for a piece already released or dropped with its connection, and
// it panics if Hold has not held n pieces.
func (p *Proxy) Release(dir Direction, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gate := p.gates[dir][n-1]
	select {
	case <-gate:
	default:
		close(gate)
	}
}

// Heal removes every delay, ends a blackhole, stops Hold and releases what
// it held back.
func (p *Proxy) Heal() {
	p.SetDelay(ToServer, 0)
	p.SetDelay(ToClient, 0)
	for _, dir := range []Direction{ToServer, ToClient} {
		p.Hold(dir, nil)
		for n := range p.HeldBack(dir) {
			p.Release(dir, n+1)
		}
	}
	p.Blackhole(false)
}

// Reset resets every open connection (both sides get a TCP RST), dropping
// whatever the proxy holds back. New connections are accepted as before.
// It returns how many connections it reset.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	links := slices.Collect(maps.Keys(p.links))
	p.mu.Unlock()
	for _, l := range links {
		p.teardown(l, true)
	}
	return len(links)
}

// ResetAfterRequest arms a one-shot fault: the first request that contains
// match, in one read, is forwarded to the server; the server's reply to it
// is dropped and that connection is reset. So the server has carried out
// the request, and the client never learns its result. The returned
// channel is closed when the fault has fired. Arming again replaces a
// fault that has not fired.
func (p *Proxy) ResetAfterRequest(match []byte) <-chan struct{} {
	tr := &trip{match: bytes.Clone(match), fired: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trip = tr
	return tr.fired
}

// Held returns how many pieces of the byte streams going in direction dir
// the proxy has read and not yet forwarded (or dropped with their
// connection): after Heal, zero means that what a blackhole held back
// has been delivered; under a delay, ToClient counts the replies (and
// pub/sub messages) held back.
func (p *Proxy) Held(dir Direction) int { return int(p.held[dir].Load()) }

// Conns returns the number of open connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops accepting, closes every connection and waits for all the
// proxy's goroutines to return. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	links := slices.Collect(maps.Keys(p.links))
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		p.teardown(l, false)
	}
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		client := c.(*net.TCPConn)
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			// The target is down: the client sees its connection reset.
			_ = client.SetLinger(0)
			_ = client.Close()
			continue
		}
		l := &link{client: client, server: s.(*net.TCPConn), done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = l.client.Close()
			_ = l.server.Close()
			return
		}
		p.links[l] = struct{}{}
		p.wg.Add(4)
		p.mu.Unlock()
		toServer := make(chan chunk, 64)
		toClient := make(chan chunk, 64)
		go p.read(l, ToServer, l.client, toServer)
		go p.write(l, ToServer, l.server, toServer)
		go p.read(l, ToClient, l.server, toClient)
		go p.write(l, ToClient, l.client, toClient)
	}
}

// read copies what src sends into out, stamped with when it may be
// forwarded, until src fails or the link ends; then it closes out.
func (p *Proxy) read(l *link, dir Direction, src net.Conn, out chan<- chunk) {
	defer p.wg.Done()
	defer close(out)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			c := chunk{data: bytes.Clone(buf[:n])}
			p.mu.Lock()
			c.at = time.Now().Add(p.delay[dir])
			if which := p.hold[dir]; which != nil && which(c.data) {
				c.gate = make(chan struct{})
				p.gates[dir] = append(p.gates[dir], c.gate)
			}
			p.mu.Unlock()
			p.held[dir].Add(1)
			select {
			case out <- c:
			case <-l.done:
				p.held[dir].Add(-1)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// write forwards the chunks from in to dst, each when its delay is over
// and no blackhole is on. When in is closed and drained (the other side
// closed its connection), or a write fails, the link ends.
func (p *Proxy) write(l *link, dir Direction, dst net.Conn, in <-chan chunk) {
	defer p.wg.Done()
	taken := false // a chunk taken from in is not yet written
	defer func() {
		// What is left is dropped with the link; the reader closes in
		// once the link is down.
		if taken {
			p.held[dir].Add(-1)
		}
		for range in {
			p.held[dir].Add(-1)
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for c := range in {
		taken = true
		if wait := time.Until(c.at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
		}
		if c.gate != nil {
			select {
			case <-c.gate:
			case <-l.done:
				return
			}
		}
		if !p.awaitHealed(l) {
			return
		}
		if p.intercept(l, dir, c.data) {
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			p.teardown(l, false)
			return
		}
		taken = false
		p.held[dir].Add(-1)
	}
	p.teardown(l, false)
}

// awaitHealed waits until no blackhole is on, and reports false if the
// link ended first.
func (p *Proxy) awaitHealed(l *link) bool {
	for {
		p.mu.Lock()
		healed := p.healed
		p.mu.Unlock()
		select {
		case <-healed:
		case <-l.done:
			return false
		}
		// The blackhole may have come back while this writer woke.
		p.mu.Lock()
		again := healed != p.healed
		p.mu.Unlock()
		if !again {
			return true
		}
	}
}

// intercept applies an armed ResetAfterRequest to a chunk about to be
// written, and reports whether it reset the link instead.
func (p *Proxy) intercept(l *link, dir Direction, data []byte) bool {
	p.mu.Lock()
	if dir == ToServer {
		// Marked before the request is written, so that the reply
		// cannot overtake the mark.
		if tr := p.trip; tr != nil && bytes.Contains(data, tr.match) {
			l.tripped, p.trip = tr, nil
		}
		p.mu.Unlock()
		return false
	}
	tr := l.tripped
	l.tripped = nil
	p.mu.Unlock()
	if tr == nil {
		return false
	}
	p.teardown(l, true)
	close(tr.fired)
	return true
}

// teardown ends a link: both connections are closed, with a TCP RST when
// reset is true, and its goroutines return.
func (p *Proxy) teardown(l *link, reset bool) {
	l.once.Do(func() {
		close(l.done)
		if reset {
			_ = l.client.SetLinger(0)
			_ = l.server.SetLinger(0)
		}
		_ = l.client.Close()
		_ = l.server.Close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	})
}
