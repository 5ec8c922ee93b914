//go:build unix

package main_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// selfSigned writes a self-signed certificate for 127.0.0.1, and its key,
// to PEM files in dir and returns their names.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "locksmith test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func writePEM(t *testing.T, name, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(name, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsServer starts a redis-server that also serves TLS, with a
// self-signed certificate, and returns it, the address of its TLS port
// and the certificate's file. It skips t if redis-server was built
// without TLS.
func tlsServer(t *testing.T) (*redistest.Server, string, string) {
	t.Helper()
	redistest.Require(t)
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir)
	tlsAddr := closedPort(t)
	_, port, _ := net.SplitHostPort(tlsAddr)
	srv, err := redistest.Start(dir, "--tls-port", port, "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-auth-clients", "no")
	if err != nil {
		t.Skipf("\n*** redis-server with --tls-port did not start: SKIPPING %s (is it built without TLS?): %v", t.Name(), err)
	}
	t.Cleanup(srv.Stop)
	return srv, tlsAddr, certFile
}

// Against a server that serves TLS, rediss:// works with its certificate
// trusted, and otherwise fails saying so; redis:// to its TLS port fails
// at once, saying that the server wants TLS.
func TestTLS(t *testing.T) {
	t.Parallel()
	_, tlsAddr, certFile := tlsServer(t)
	empty := filepath.Join(t.TempDir(), "no-certs.pem")
	touch(t, empty)
	trusted := []string{"SSL_CERT_FILE=" + certFile}
	dir := t.TempDir()

	key := uniqueKey(t)
	p, token := runHolding(t, trusted, dir, key, "--redis", "rediss://"+tlsAddr)
	code, stdout, stderr := locksmith(t, trusted, "status", "--redis", "rediss://"+tlsAddr, "--key", key, "--show-token")
	if code != 0 || !strings.Contains(stdout, token) {
		t.Errorf("status over rediss:// while run holds the lock: exit %d, stdout %q, stderr %q; want 0 and %q",
			code, stdout, stderr, token)
	}
	proceed(t, dir, key)
	p.expect(t, 0)

	const dialTimeout = time.Second
	for _, tc := range []struct {
		name string
		env  []string
		url  string
		want []string // in stderr
	}{
		{"certificate not trusted", []string{"SSL_CERT_FILE=" + empty, "SSL_CERT_DIR=" + t.TempDir()}, "rediss://" + tlsAddr,
			[]string{"TLS handshake with " + tlsAddr + ": the server's certificate is not trusted"}},
		{"redis to the TLS port", trusted, "redis://" + tlsAddr,
			[]string{tlsAddr + " closed the connection before answering", "use rediss://"}},
	} {
		requireDialFailure(t, tc.name, tc.env, tc.url, dialTimeout, tc.want)
	}
}
