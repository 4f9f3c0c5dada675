// Package devtls makes and loads a development PKI in one directory: a CA
// and the server and client certificates it signs (`agentreach auth tls`,
// `up --tls`), and the TLS configuration of a server that uses them. For
// development and tests: production brings its own PKI (docs/security.md).
package devtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/agent-reach/agentreach/internal/atomicfile"
)

// Lifetimes of the development certificates.
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 825 * 24 * time.Hour
)

// TLSFiles names the files of a development PKI in one directory.
type TLSFiles struct {
	// CA is the CA certificate every client and server trusts; CAKey its
	// key, which only signs certificates (keep it off the servers).
	CA, CAKey string
	// ServerCert and ServerKey are the servers' certificate (for client and
	// route ports) and key.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate for mutual TLS.
	ClientCert, ClientKey string
}

// TLSFilesIn returns the file names EnsureTLS uses in dir.
func TLSFilesIn(dir string) TLSFiles {
	f := func(name string) string { return filepath.Join(dir, name) }
	return TLSFiles{CA: f("ca.pem"), CAKey: f("ca-key.pem"), ServerCert: f("server.pem"), ServerKey: f("server-key.pem"),
		ClientCert: f("client.pem"), ClientKey: f("client-key.pem")}
}

// EnsureTLS makes a development PKI in dir unless it is there: a CA, a
// server certificate valid for hosts (names and IP addresses) and for
// routes (client and server use), and a client certificate for mutual TLS.
// A server certificate that does not cover every host is made again under
// the same CA. Keys are ECDSA P-256, files of mode 0600. For production use
// your own CA (docs/security.md).
func EnsureTLS(dir string, hosts []string) (TLSFiles, error) {
	files := TLSFilesIn(dir)
	if len(hosts) == 0 {
		return files, errors.New("auth: EnsureTLS needs at least one host name or address")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return files, fmt.Errorf("auth: %w", err)
	}
	ca, caKey, err := loadPair(files.CA, files.CAKey)
	if errors.Is(err, fs.ErrNotExist) {
		ca, caKey, err = issue(files.CA, files.CAKey, &x509.Certificate{
			Subject:               pkix.Name{CommonName: "Agent-Reach development CA", Organization: []string{"Agent-Reach"}},
			IsCA:                  true,
			BasicConstraintsValid: true,
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		}, caLifetime, nil, nil)
	}
	if err != nil {
		return files, err
	}
	if cert, _, err := loadPair(files.ServerCert, files.ServerKey); err != nil || !covers(cert, ca, hosts) {
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: hosts[0], Organization: []string{"Agent-Reach"}},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		if _, _, err := issue(files.ServerCert, files.ServerKey, tmpl, leafLifetime, ca, caKey); err != nil {
			return files, err
		}
	}
	if _, _, err := loadPair(files.ClientCert, files.ClientKey); err != nil {
		if _, _, err := issue(files.ClientCert, files.ClientKey, &x509.Certificate{
			Subject:     pkix.Name{CommonName: "agentreach-client", Organization: []string{"Agent-Reach"}},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, leafLifetime, ca, caKey); err != nil {
			return files, err
		}
	}
	return files, nil
}

// covers reports whether cert is signed by ca, valid a while yet, and names
// every host.
func covers(cert, ca *x509.Certificate, hosts []string) bool {
	if cert.CheckSignatureFrom(ca) != nil || time.Until(cert.NotAfter) < 30*24*time.Hour {
		return false
	}
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// issue makes a key and a certificate from tmpl, signed by parent (self
// signed when nil), and writes both as PEM.
func issue(certFile, keyFile string, tmpl *x509.Certificate, lifetime time.Duration, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(lifetime)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: certificate %s: %w", certFile, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	if err := atomicfile.Write(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	if err := atomicfile.Write(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	return cert, key, nil
}

// loadPair reads a PEM certificate and its ECDSA key; a missing file is
// fs.ErrNotExist.
func loadPair(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		if _, serr := os.Stat(certFile); errors.Is(serr, fs.ErrNotExist) {
			return nil, nil, serr
		}
		if _, serr := os.Stat(keyFile); errors.Is(serr, fs.ErrNotExist) {
			return nil, nil, serr
		}
		return nil, nil, fmt.Errorf("auth: %s: %w", certFile, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("auth: %s: want an ECDSA key", keyFile)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %s: %w", certFile, err)
	}
	return cert, key, nil
}

// ServerTLSConfig returns the TLS configuration of a server with files:
// its certificate, and with verify, client certificates required and
// checked against the CA (mutual TLS).
func ServerTLSConfig(files TLSFiles, verify bool) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(files.ServerCert, files.ServerKey)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", files.ServerCert, err)
	}
	pool, err := certPool(files.CA)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	if verify {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// certPool reads the CA certificates of file.
func certPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("auth: %s holds no PEM certificate", file)
	}
	return pool, nil
}
