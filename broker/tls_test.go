package broker_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/testdb"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mqlite test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestServeTLS: the broker serves HTTPS from certificate and key files.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := selfSigned(t)
	tb := testdb.Open(t, mqlite.Config{})
	srv, err := broker.New(broker.Config{Store: tb.Store, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(sctx, ln, certFile, keyFile) }()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	resp, err := hc.Get("https://" + ln.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("readyz over TLS: %d, tls %v", resp.StatusCode, resp.TLS != nil)
	}
	// Every answer over TLS tells the browser to stay on HTTPS.
	for _, path := range []string{"/readyz", "/v1/whoami", "/ui/"} {
		resp, err := hc.Get("https://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Strict-Transport-Security"); got != "max-age=31536000" {
			t.Errorf("GET %s over TLS: Strict-Transport-Security %q, want max-age=31536000", path, got)
		}
	}
	// Plain HTTP on the TLS port is refused.
	if resp, err := http.Get("http://" + ln.Addr().String() + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP served on the TLS listener")
		}
	}
	http.DefaultClient.CloseIdleConnections()
	tr.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestNoHSTSWithoutTLS: an answer over plain HTTP carries no
// Strict-Transport-Security (browsers ignore it there, and it would
// promise what the listener does not serve).
func TestNoHSTSWithoutTLS(t *testing.T) {
	t.Parallel()
	url := serve(t, broker.Config{Store: testdb.Open(t, mqlite.Config{}).Store, Logger: quiet()}, nil)
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Strict-Transport-Security"); got != "" {
		t.Fatalf("Strict-Transport-Security %q over plain HTTP", got)
	}
}
