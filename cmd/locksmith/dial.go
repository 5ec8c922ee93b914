package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// tlsHint names the likely cause of a TLS handshake that fails for want
// of TLS on the other side.
const tlsHint = "is the server serving TLS? rediss:// expects TLS, redis:// is plain"

// dialer returns the go-redis Options.Dialer of every connection locksmith
// makes: a TCP or Unix socket connection and, unless config is nil, the
// TLS handshake, both within timeout. It does what go-redis's own dialer
// does, but its errors name the address and the likely cause, where
// go-redis's say "context deadline exceeded" or "EOF". (connect also
// turns off go-redis's retries, which made one failing dial take five
// times --dial-timeout.)
func dialer(timeout time.Duration, config *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, dialFailed(addr, timeout, err)
		}
		if config == nil {
			return newPlainConn(conn, addr), nil
		}
		if config.ServerName == "" {
			config = config.Clone()
			config.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tconn := tls.Client(conn, config)
		if err := tconn.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, handshakeFailed(addr, timeout, err)
		}
		return tconn, nil
	}
}

// dialFailed returns the error for a connection to addr that failed with
// err.
func dialFailed(addr string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("connection to %s refused: is Redis running there, on that port? (%w)", addr, err)
	case isTimeout(err):
		return fmt.Errorf("no connection to %s within %v (--dial-timeout): is the host up and the port open? (%w)",
			addr, timeout, err)
	}
	return fmt.Errorf("cannot connect to %s: %w", addr, err)
}

// handshakeFailed returns the error for a TLS handshake with addr that
// failed with err.
func handshakeFailed(addr string, timeout time.Duration, err error) error {
	var (
		header tls.RecordHeaderError
		verify *tls.CertificateVerificationError
		cert   x509.UnknownAuthorityError
	)
	switch {
	case isTimeout(err):
		// A server without TLS reads the ClientHello as the start of a
		// command and waits for the rest.
		return fmt.Errorf("TLS handshake with %s did not complete within %v (--dial-timeout): %s (%w)",
			addr, timeout, tlsHint, err)
	case errors.As(err, &header):
		return fmt.Errorf("%s answered the TLS handshake with something other than TLS: %s (%w)", addr, tlsHint, err)
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("%s closed the connection during the TLS handshake: %s (%w)", addr, tlsHint, err)
	case errors.As(err, &verify) || errors.As(err, &cert):
		return fmt.Errorf("TLS handshake with %s: the server's certificate is not trusted "+
			"(give its CA in SSL_CERT_FILE or SSL_CERT_DIR): %w", addr, err)
	}
	return fmt.Errorf("TLS handshake with %s failed: %w", addr, err)
}

// isTimeout reports whether err is a dial or handshake that ran out of
// time.
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &netErr) && netErr.Timeout()
}

// A plainConn is a connection without TLS that tells, on its first read,
// a server that speaks only TLS: one that closes the connection at once,
// or answers with a TLS record.
type plainConn struct {
	net.Conn
	addr     string
	answered atomic.Bool // whether a Read has returned data
}

// newPlainConn returns conn, a connection to addr, as a plainConn if it
// gives go-redis the syscall.Conn that its health checks need, else
// unwrapped.
func newPlainConn(conn net.Conn, addr string) net.Conn {
	if _, ok := conn.(syscall.Conn); !ok {
		return conn
	}
	return &plainConn{Conn: conn, addr: addr}
}

// Read reads from the connection; until it has returned data, it returns
// an error that names the likely cause for a closed connection or a TLS
// record.
func (c *plainConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.answered.Load() {
		return n, err
	}
	switch {
	case n > 0 && (b[0] == 0x15 || b[0] == 0x16) && (n < 2 || b[1] == 0x03):
		// A TLS alert (0x15) or handshake (0x16) record, of TLS 1.x.
		return 0, firstReadError(fmt.Errorf("%s answered in TLS: it expects rediss://, and redis:// is plain", c.addr))
	case n > 0:
		c.answered.Store(true)
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		return 0, firstReadError(fmt.Errorf("%s closed the connection before answering: "+
			"if it serves only TLS, use rediss:// (redis:// is plain) (%w)", c.addr, err))
	}
	return n, err
}

// firstReadError returns err, the error of a connection's first read, in
// a form that survives go-redis: it reports an error that fails a new
// connection's first command (HELLO) by its errors.Unwrap, which would
// leave only the cause, such as "EOF". errors.Join's error has no single
// cause to unwrap to, and says what err says.
func firstReadError(err error) error { return errors.Join(err) }

// SyscallConn returns the raw connection, which go-redis peeks at to tell
// whether an idle connection is still alive.
func (c *plainConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}
