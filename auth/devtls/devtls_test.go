package devtls

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

func TestEnsureTLS(t *testing.T) {
	dir := t.TempDir()
	files, err := EnsureTLS(dir, []string{"localhost", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile(files.CA)
	server, _ := os.ReadFile(files.ServerCert)
	// Again with the same hosts: nothing changes.
	if _, err := EnsureTLS(dir, []string{"localhost", "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(files.ServerCert); !bytes.Equal(again, server) {
		t.Error("the server certificate was made again for the same hosts")
	}
	// A new host: a new server certificate under the same CA.
	if _, err := EnsureTLS(dir, []string{"nats-1", "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(files.CA); !bytes.Equal(again, ca) {
		t.Error("the CA changed: every client would have to trust a new one")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	for _, f := range []string{files.ServerCert, files.ClientCert} {
		pair, err := tls.LoadX509KeyPair(f, map[string]string{files.ServerCert: files.ServerKey, files.ClientCert: files.ClientKey}[f])
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(pair.Certificate[0])
		usage := x509.ExtKeyUsageClientAuth
		if f == files.ServerCert {
			usage = x509.ExtKeyUsageServerAuth
			if err := leaf.VerifyHostname("nats-1"); err != nil {
				t.Errorf("server certificate: %v", err)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("%s does not verify against the CA: %v", f, err)
		}
	}
	if st, err := os.Stat(files.CAKey); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode %v (%v), want 0600", st.Mode(), err)
	}
	cfg, err := ServerTLSConfig(files, true)
	if err != nil || cfg.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("ServerTLSConfig(verify): %+v, %v", cfg, err)
	}
	if _, err := EnsureTLS(dir, nil); err == nil {
		t.Error("EnsureTLS without hosts succeeded")
	}
}
