//go:build linux

package faults_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith/internal/faults"
)

// echoServer is a TCP server that sends back every byte it receives and
// keeps a copy.
type echoServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	received bytes.Buffer
	conns    []net.Conn
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						s.mu.Lock()
						s.received.Write(buf[:n])
						s.mu.Unlock()
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received.String()
}

func dial(t *testing.T, p *faults.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip sends msg and reads it back, within d.
func roundTrip(c net.Conn, msg string, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

// echoThroughProxy starts an echo server and a proxy to it, and returns
// them with a connection through the proxy that has made a round trip.
func echoThroughProxy(t *testing.T) (*echoServer, *faults.Proxy, net.Conn) {
	t.Helper()
	echo := newEchoServer(t)
	p := newProxy(t, echo.ln.Addr().String())
	c := dial(t, p)
	got, err := roundTrip(c, "warm", time.Second)
	require.NoError(t, err)
	require.Equal(t, "warm", got)
	return echo, p, c
}

func TestProxyForwardsAndDelays(t *testing.T) {
	_, p, c := echoThroughProxy(t)
	for _, dir := range []faults.Direction{faults.ToServer, faults.ToClient} {
		t.Run(dir.String(), func(t *testing.T) {
			const delay = 150 * time.Millisecond
			p.SetDelay(dir, delay)
			start := time.Now()
			got, err := roundTrip(c, "slow", 5*time.Second)
			require.NoError(t, err)
			require.Equal(t, "slow", got)
			require.GreaterOrEqual(t, time.Since(start), delay)
			p.SetDelay(dir, 0)
			start = time.Now()
			_, err = roundTrip(c, "fast", 5*time.Second)
			require.NoError(t, err)
			require.Less(t, time.Since(start), delay, "the delay outlived SetDelay(0)")
		})
	}
}

func TestProxyBlackholeHoldsBytesUntilHealed(t *testing.T) {
	echo, p, c := echoThroughProxy(t)

	p.Blackhole(true)
	_, err := roundTrip(c, "lost?", 200*time.Millisecond)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "got %v, want a timeout", err)
	require.NotContains(t, echo.got(), "lost?", "the server got bytes through a blackhole")
	// New connections are accepted, and just as silent.
	c2 := dial(t, p)
	_, err = roundTrip(c2, "new", 200*time.Millisecond)
	require.Error(t, err)
	require.Equal(t, 2, p.Conns(), "connections stay open in a blackhole")
	require.Equal(t, 2, p.Held(faults.ToServer), "what the blackhole holds back")
	require.Zero(t, p.Held(faults.ToClient))

	// Healed, the held bytes go through, as TCP retransmission would
	// deliver them.
	p.Heal()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len("lost?"))
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "lost?", string(buf))
	_ = c2.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadFull(c2, buf[:len("new")])
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Held(faults.ToServer)+p.Held(faults.ToClient) == 0 }, 5*time.Second, time.Millisecond, "delivered, nothing is held")

	// Dropped with a reset, nothing is held either.
	p.Blackhole(true)
	_, err = c.Write([]byte("dropped"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Held(faults.ToServer) == 1 }, 5*time.Second, time.Millisecond)
	p.Reset()
	require.Eventually(t, func() bool { return p.Held(faults.ToServer)+p.Held(faults.ToClient) == 0 }, 5*time.Second, time.Millisecond)
	p.Heal()
}

func TestProxyHoldReleasesPiecesOneByOne(t *testing.T) {
	_, p, c1 := echoThroughProxy(t)
	c2 := dial(t, p)
	heldBack := func(n int) func() bool { return func() bool { return p.HeldBack(faults.ToClient) == n } }
	read := func(c net.Conn, want string) {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, len(want))
		_, err := io.ReadFull(c, buf)
		require.NoError(t, err)
		require.Equal(t, want, string(buf))
	}

	p.Hold(faults.ToClient, func(piece []byte) bool { return !bytes.Equal(piece, []byte("skip")) })
	_, err := roundTrip(c1, "skip", 5*time.Second)
	require.NoError(t, err, "a piece Hold does not select went through")
	require.Zero(t, p.HeldBack(faults.ToClient))
	_, err = c1.Write([]byte("one"))
	require.NoError(t, err)
	require.Eventually(t, heldBack(1), 5*time.Second, time.Millisecond, "the first echo was not held back")
	_, err = c2.Write([]byte("two"))
	require.NoError(t, err)
	require.Eventually(t, heldBack(2), 5*time.Second, time.Millisecond, "the second echo was not held back")

	// The second goes first; the first is still held.
	p.Release(faults.ToClient, 2)
	read(c2, "two")
	require.Eventually(t, func() bool { return p.Held(faults.ToClient) == 1 }, 5*time.Second, time.Millisecond,
		"the first echo went through before its release")
	_ = c1.SetReadDeadline(time.Now())
	_, err = c1.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the first echo went through before its release")
	p.Release(faults.ToClient, 2) // released already: a no-op
	p.Release(faults.ToClient, 1)
	read(c1, "one")

	// Off, new pieces go through; Heal releases what is held.
	_, err = c1.Write([]byte("three"))
	require.NoError(t, err)
	require.Eventually(t, heldBack(3), 5*time.Second, time.Millisecond)
	p.Hold(faults.ToClient, nil)
	got, err := roundTrip(c2, "four", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "four", got)
	require.Equal(t, 3, p.HeldBack(faults.ToClient))
	p.Heal()
	read(c1, "three")
	require.Zero(t, p.HeldBack(faults.ToServer), "Hold held back requests")
}

func TestProxyReset(t *testing.T) {
	_, p, c := echoThroughProxy(t)
	require.Equal(t, 1, p.Reset())
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	require.Error(t, err, "the connection survived a reset")
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "got %v, want a reset", err)

	// The proxy still serves new connections.
	got, err := roundTrip(dial(t, p), "again", time.Second)
	require.NoError(t, err)
	require.Equal(t, "again", got)
}

func TestProxyResetAfterRequest(t *testing.T) {
	echo, p, c := echoThroughProxy(t)

	fired := p.ResetAfterRequest([]byte("MATCH"))
	_, err := roundTrip(c, "not this", time.Second)
	require.NoError(t, err, "a request without the match went through")
	_, err = roundTrip(c, "the MATCH request", 5*time.Second)
	require.Error(t, err, "the reply to the matching request arrived")
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("the fault did not report firing")
	}
	require.Contains(t, echo.got(), "the MATCH request", "the request must reach the server")

	// One shot: the next connection is untouched.
	got, err := roundTrip(dial(t, p), "the MATCH again", time.Second)
	require.NoError(t, err)
	require.Equal(t, "the MATCH again", got)
}

func TestProxyCloseEndsConnections(t *testing.T) {
	_, p, c := echoThroughProxy(t)
	p.Blackhole(true)
	_, _ = c.Write([]byte("held"))
	require.NoError(t, p.Close()) // returns only once every goroutine has
	require.NoError(t, p.Close())
	require.Zero(t, p.Conns())
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	require.Error(t, err)
	_, err = net.Dial("tcp", p.Addr())
	require.Error(t, err, "a closed proxy accepted a connection")
}
