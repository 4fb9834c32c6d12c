package k8stest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// secrets are the files kube-apiserver is given, all made here: a CA, a
// serving certificate it signed, the service-account signing key, and a
// token file with one administrator.
type secrets struct {
	caPEM              []byte
	caFile             string
	certFile, keyFile  string
	saKeyFile          string
	tokenFile, token   string
	notBefore, expires time.Time
}

// tokenUser is the administrator the token authenticates as.
const tokenUser = "airlock-test"

// writeSecrets writes the files into dir. now is the clock the
// certificates are valid from (an hour before, for skew) for a day.
func writeSecrets(dir string, now time.Time) (*secrets, error) {
	s := &secrets{notBefore: now.Add(-time.Hour), expires: now.Add(24 * time.Hour)}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "airlock k8stest CA"},
		NotBefore:             s.notBefore,
		NotAfter:              s.expires,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("k8stest: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	s.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	// The names the API server is reached by: loopback here, and the
	// in-cluster names it would have in a cluster.
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    s.notBefore,
		NotAfter:     s.expires,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("k8stest: serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	s.token = hex.EncodeToString(tok)

	s.caFile = filepath.Join(dir, "ca.crt")
	s.certFile = filepath.Join(dir, "apiserver.crt")
	s.keyFile = filepath.Join(dir, "apiserver.key")
	s.saKeyFile = filepath.Join(dir, "sa.key")
	s.tokenFile = filepath.Join(dir, "tokens.csv")
	files := []struct {
		path string
		data []byte
	}{
		{s.caFile, s.caPEM},
		{s.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})},
		{s.keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})},
		{s.saKeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER})},
		// token,user,uid,"group1,group2" (--token-auth-file)
		{s.tokenFile, []byte(s.token + "," + tokenUser + "," + tokenUser + ",system:masters\n")},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, fmt.Errorf("k8stest: %w", err)
		}
	}
	return s, nil
}

// serial returns a random certificate serial number (RFC 5280: positive,
// at most 20 octets).
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("airlock bug: crypto/rand failed: " + err.Error()) // crypto/rand.Read never fails on Linux 3.17+ and darwin
	}
	return n.Add(n, big.NewInt(1))
}
