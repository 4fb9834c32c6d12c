//go:build e2e

package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// demoWheel builds airlockdemo-1.0-py3-none-any.whl in memory.
func demoWheel(t *testing.T) []byte {
	files := []struct{ name, data string }{
		{"airlockdemo/__init__.py", "VALUE = 'installed through airlock'\n"},
		{"airlockdemo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: airlockdemo\nVersion: 1.0\n"},
		{"airlockdemo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: airlock-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.data))
		sum := sha256.Sum256([]byte(f.data))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.data))
	}
	record.WriteString("airlockdemo-1.0.dist-info/RECORD,,\n")
	w, err := zw.Create("airlockdemo-1.0.dist-info/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// egressModes are the two ways a program inside reaches a granted host,
// by name, with the shell prefix that selects each: through the proxy
// variables airlock sets, or with them unset (transparent egress).
var egressModes = map[string]string{
	"proxy":       "",
	"transparent": "unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy; ",
}

// countingServer serves h on the host's loopback and counts connections.
func countingServer(t *testing.T, h http.Handler) (port string, conns *atomic.Int32) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns = &atomic.Int32{}
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), conns
}

// runAirlock runs the airlock binary with args and returns its output.
func runAirlock(t *testing.T, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if os.Geteuid() != 0 {
		args = append([]string{args[0], "--allow-downgrade", "max_memory", "--allow-downgrade", "max_pids"}, args[1:]...)
	}
	b, err := exec.CommandContext(ctx, mcpBinary(t), args...).CombinedOutput()
	return string(b), err
}

// writableOut returns a folder the sandbox may write (its parent
// searchable for the sandbox's uid).
func writableOut(t *testing.T) string {
	out := t.TempDir()
	if err := os.Chmod(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestToolTablePipInstall: python3 -m pip installs a package from a
// simple index on the host's loopback, through the proxy variables and
// transparently (without them); an index on a port that is not granted
// gets nothing and pip fails.
func TestToolTablePipInstall(t *testing.T) {
	airtest.RequireUserNS(t)
	if err := exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run(); err != nil {
		airtest.SkipOrFail(t, "/usr/bin/python3 has no pip (install python3-pip): %v", err)
	}
	whl := demoWheel(t)
	sum := sha256.Sum256(whl)
	port, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/simple/airlockdemo/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<html><body><a href="/files/airlockdemo-1.0-py3-none-any.whl#sha256=%s">airlockdemo-1.0-py3-none-any.whl</a></body></html>`, hex.EncodeToString(sum[:]))
		case "/files/airlockdemo-1.0-py3-none-any.whl":
			w.Write(whl)
		default:
			http.NotFound(w, r)
		}
	}))
	evilPort, evilConns := countingServer(t, http.NotFoundHandler())
	host := "host.airlock.internal:" + port
	for mode, unset := range egressModes {
		t.Run(mode, func(t *testing.T) {
			out := writableOut(t)
			script := unset + "python3 -m pip install --quiet --no-cache-dir --disable-pip-version-check --trusted-host host.airlock.internal --index-url http://" + host + "/simple/ --target " + out + "/lib airlockdemo"
			b, err := runAirlock(t, "run", "--net-host", host, "--tool", "sh", "--tool", "python3", "--fs-write", out, "--max-wall", "60s", "--", "sh", "-c", script)
			if err != nil {
				t.Fatalf("pip install: %v\n%s", err, b)
			}
			if got, err := os.ReadFile(filepath.Join(out, "lib", "airlockdemo", "__init__.py")); err != nil || !strings.Contains(string(got), "installed through airlock") {
				t.Fatalf("the package did not arrive: %q %v\n%s", got, err, b)
			}
		})
	}
	out := writableOut(t)
	b, err := runAirlock(t, "run", "--net-host", host, "--tool", "python3", "--fs-write", out, "--max-wall", "60s", "--",
		"python3", "-m", "pip", "install", "--quiet", "--no-cache-dir", "--retries", "0", "--timeout", "5", "--trusted-host", "host.airlock.internal", "--index-url", "http://host.airlock.internal:"+evilPort+"/simple/", "--target", out+"/lib", "airlockdemo")
	if err == nil {
		t.Fatalf("pip installed from an index that is not granted:\n%s", b)
	}
	if n := evilConns.Load(); n != 0 {
		t.Fatalf("the index that is not granted received %d connections", n)
	}
}

// TestToolTableNpmInstall: npm installs a package from a registry on the
// host's loopback (through CONNECT as plain HTTP, what made it hang
// before) and transparently; a registry on a port that is not granted gets
// nothing.
func TestToolTableNpmInstall(t *testing.T) {
	airtest.RequireUserNS(t)
	const npmCLI = "/usr/lib/node_modules/npm/bin/npm-cli.js"
	airtest.RequireBinary(t, "/usr/bin/node")
	if _, err := os.Stat(npmCLI); err != nil {
		airtest.SkipOrFail(t, "npm is not installed (%s): install npm", npmCLI)
	}
	var tgz bytes.Buffer
	gz := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(gz)
	for name, data := range map[string]string{"package/package.json": `{"name":"airlockdemo","version":"1.0.0","main":"index.js"}`, "package/index.js": "module.exports = 'installed through airlock'\n"} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(1700000000, 0), Typeflag: tar.TypeReg})
		tw.Write([]byte(data))
	}
	tw.Close()
	gz.Close()
	s1 := sha1.Sum(tgz.Bytes())
	s512 := sha512.Sum512(tgz.Bytes())
	var port string
	port, _ = countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/airlockdemo":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{
				"name": "airlockdemo", "dist-tags": map[string]string{"latest": "1.0.0"},
				"versions": map[string]any{"1.0.0": map[string]any{"name": "airlockdemo", "version": "1.0.0",
					"dist": map[string]string{"tarball": "http://host.airlock.internal:" + port + "/airlockdemo/-/airlockdemo-1.0.0.tgz",
						"shasum": hex.EncodeToString(s1[:]), "integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:])}}},
			})
		case "/airlockdemo/-/airlockdemo-1.0.0.tgz":
			w.Write(tgz.Bytes())
		default:
			http.NotFound(w, r)
		}
	}))
	evilPort, evilConns := countingServer(t, http.NotFoundHandler())
	host := "host.airlock.internal:" + port
	npm := func(out, registry, unset string) (string, error) {
		script := unset + "cd " + out + " && node " + npmCLI + " install --no-audit --no-fund --no-update-notifier --fetch-retries=0 --fetch-timeout=10000 --cache /tmp/npm-cache --registry " + registry + " airlockdemo"
		return runAirlock(t, "run", "--net-host", host, "--tool", "sh", "--tool", "node", "--fs-write", out, "--max-wall", "90s", "--max-ops", "10000", "--", "sh", "-c", script)
	}
	for mode, unset := range egressModes {
		t.Run(mode, func(t *testing.T) {
			out := writableOut(t)
			b, err := npm(out, "http://"+host+"/", unset)
			if err != nil {
				t.Fatalf("npm install: %v\n%s", err, b)
			}
			if got, err := os.ReadFile(filepath.Join(out, "node_modules", "airlockdemo", "index.js")); err != nil || !strings.Contains(string(got), "installed through airlock") {
				t.Fatalf("the package did not arrive: %q %v\n%s", got, err, b)
			}
		})
	}
	if b, err := npm(writableOut(t), "http://host.airlock.internal:"+evilPort+"/", ""); err == nil {
		t.Fatalf("npm installed from a registry that is not granted:\n%s", b)
	}
	if n := evilConns.Load(); n != 0 {
		t.Fatalf("the registry that is not granted received %d connections", n)
	}
}

// TestToolTableGitCloneHTTPS: git clone over HTTPS from a server on the
// host's loopback, its certificate trusted by GIT_SSL_CAINFO, through the
// proxy (CONNECT, SNI checked) and transparently.
func TestToolTableGitCloneHTTPS(t *testing.T) {
	airtest.RequireBinary(t, "/usr/bin/git")
	airtest.RequireUserNS(t)
	srv := gitRepo(t, "cloned over https\n")

	cert, caPEM := hostCert(t, "host.airlock.internal")
	ln, err := tls.Listen("tcp4", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = http.Serve(ln, http.FileServer(http.Dir(srv))) }()
	t.Cleanup(func() { ln.Close() })
	host := "host.airlock.internal:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	caDir := t.TempDir()
	os.Chmod(caDir, 0o755)
	if err := os.WriteFile(filepath.Join(caDir, "ca.pem"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for mode, unset := range egressModes {
		t.Run(mode, func(t *testing.T) {
			out := writableOut(t)
			b, err := runAirlock(t, "run", "--net-host", host, "--tool", "sh", "--tool", "git", "--tool", "/usr/lib/git-core/git", "--tool", "/usr/lib/git-core/git-remote-https",
				"--fs-read", caDir, "--env", "GIT_SSL_CAINFO="+filepath.Join(caDir, "ca.pem"), "--fs-write", out, "--",
				"sh", "-c", unset+"git clone -q https://"+host+"/repo.git "+filepath.Join(out, "r"))
			if err != nil {
				t.Fatalf("git clone https: %v\n%s", err, b)
			}
			if got, err := os.ReadFile(filepath.Join(out, "r", "a.txt")); err != nil || string(got) != "cloned over https\n" {
				t.Fatalf("a.txt on the host = %q, %v\n%s", got, err, b)
			}
		})
	}
}

// hostCert returns a certificate for name signed by a new CA, and the CA's
// PEM.
func hostCert(t *testing.T, name string) (tls.Certificate, []byte) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}
