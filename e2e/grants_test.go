//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// nestedTree is a workspace with nested grants and a host folder that the
// sandbox will try to splice into them:
//
//	ws/            fs_write
//	ws/a/data/     fs_read   (granted.txt)
//	ws/b/out/      fs_write
//	host/data/secret.txt     outside every grant
//	host/out/config.sh       outside every grant
type nestedTree struct {
	ws, host, secret, config string
}

func newNestedTree(t *testing.T) nestedTree {
	t.Helper()
	root := t.TempDir()
	nt := nestedTree{ws: filepath.Join(root, "ws"), host: filepath.Join(root, "host")}
	nt.secret, nt.config = filepath.Join(nt.host, "data", "secret.txt"), filepath.Join(nt.host, "out", "config.sh")
	for _, d := range []string{"ws/a/data", "ws/b/out", "host/data", "host/out"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, data := range map[string]string{filepath.Join(nt.ws, "a/data/granted.txt"): "granted\n", nt.secret: "HOST SECRET\n", nt.config: "HOST ORIGINAL\n"} {
		if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return nt
}

func (nt nestedTree) policy() string {
	return fmt.Sprintf("version: 1\nfs_write: [%s, %s/b/out]\nfs_read: [%s/a/data]\nallowed_tools: [sh, mv, ln, rm]\nbudget:\n  max_wall: 2m\n  max_ops: 100000\n", nt.ws, nt.ws, nt.ws)
}

// swap replaces the grants' ancestors by symlinks to the host folder.
func (nt nestedTree) swap() string {
	return fmt.Sprintf("cd %s && mv a a.orig; ln -s %s a; mv b b.orig; ln -s %s b; true", nt.ws, nt.host, nt.host)
}

// checkHost fails t when a host file outside every grant was changed, or
// an ancestor of a grant was replaced on the host.
func (nt nestedTree) checkHost(t *testing.T) {
	t.Helper()
	if b, _ := os.ReadFile(nt.config); string(b) != "HOST ORIGINAL\n" {
		t.Errorf("a host file outside every grant was overwritten: %q", b)
	}
	for _, d := range []string{"a", "b"} {
		if fi, err := os.Lstat(filepath.Join(nt.ws, d)); err != nil || !fi.IsDir() {
			t.Errorf("host %s/%s = %v, %v: an ancestor of a grant was replaced on the host", nt.ws, d, fi, err)
		}
	}
}

// TestServeNestedGrantSwap: code inside a session replaces the folders
// above its nested grants by symlinks to a host folder. The files API
// keeps resolving beneath the grants it opened when the session started:
// it never reads or writes the host folder, in a single attempt or while
// the swap is repeated in a loop, and a later session with the same policy
// still starts.
func TestServeNestedGrantSwap(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	bin := mcpBinary(t)
	nt := newNestedTree(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nested.yaml"), []byte(nt.policy()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, bin, "--policy-dir", dir)
	c := p.client(t)
	ctx := serveCtx(t)
	s, err := c.CreateSession(ctx, client.CreateRequest{PolicyName: "nested"})
	if err != nil {
		t.Fatalf("CreateSession: %v\n%s", err, p.logText())
	}
	rep, err := s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", nt.swap()}})
	if err != nil || rep.ExitCode != 0 {
		t.Fatalf("swap: %+v, %v", rep, err)
	}
	if got, err := s.Download(ctx, filepath.Join(nt.ws, "a/data/secret.txt")); err == nil || bytes.Contains(got, []byte("HOST")) {
		t.Fatalf("GET a/data/secret.txt through the swapped ancestor = %q, %v: a host file", got, err)
	}
	if got, err := s.Download(ctx, filepath.Join(nt.ws, "a/data/granted.txt")); err != nil || string(got) != "granted\n" {
		t.Fatalf("GET of the real grant = %q, %v", got, err)
	}
	if err := s.Upload(ctx, filepath.Join(nt.ws, "b/out/config.sh"), strings.NewReader("from the API\n")); err != nil {
		t.Fatalf("PUT into the real grant: %v", err)
	}

	// The swap in a loop, for a bounded time, against a hammered API.
	rep, err = s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", fmt.Sprintf(
		`cd %s && (while :; do mv a a.x 2>/dev/null; ln -s %s a 2>/dev/null; rm -f a 2>/dev/null; mv a.x a 2>/dev/null; done) >/dev/null 2>&1 &`, nt.ws, nt.host)}})
	if err != nil || rep.ExitCode != 0 {
		t.Fatalf("background swap: %+v, %v", rep, err)
	}
	end := time.Now().Add(3 * time.Second)
	n := 0
	for ; time.Now().Before(end); n++ {
		got, err := s.Download(ctx, filepath.Join(nt.ws, "a/data/granted.txt"))
		if bytes.Contains(got, []byte("HOST")) {
			t.Fatalf("request %d read the host file through the swapped ancestor", n)
		}
		if err != nil {
			t.Fatalf("request %d of the held grant failed: %v", n, err)
		}
		if err := s.Upload(ctx, filepath.Join(nt.ws, "b/out/config.sh"), strings.NewReader("loop\n")); err != nil {
			t.Fatalf("request %d: PUT: %v", n, err)
		}
	}
	t.Logf("%d GET+PUT pairs during the swap loop", n)
	if err := s.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	nt.checkHost(t)
	if b, _ := os.ReadFile(filepath.Join(nt.ws, "b/out/config.sh")); string(b) != "loop\n" {
		t.Errorf("the API's writes did not reach the real grant when the session ended: %q", b)
	}
	// The same policy still starts: no persistent denial of service.
	s2, err := c.CreateSession(ctx, client.CreateRequest{PolicyName: "nested"})
	if err != nil {
		t.Fatalf("a new session with the same policy: %v\n%s", err, p.logText())
	}
	_ = s2.Destroy(ctx) // the server's shutdown closes it anyway
}

// TestMCPNestedGrantSwapAndFileGrants: the same swap through `airlock mcp`:
// read_file, write_file and list_files resolve beneath the grants held
// from the start; and single-file grants work in all three.
func TestMCPNestedGrantSwapAndFileGrants(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	bin := mcpBinary(t)
	nt := newNestedTree(t)
	single := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(single, []byte("notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(bin, "mcp", "--fs-write", nt.ws, "--fs-write", nt.ws+"/b/out", "--fs-read", nt.ws+"/a/data",
		"--fs-read", single, "--tool", "sh", "--tool", "mv", "--tool", "ln")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "airlock-e2e", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	defer cs.Close()
	call := func(name string, args map[string]any) (*sdk.CallToolResult, map[string]any) {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, stderr.String())
		}
		var out map[string]any
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out) // some results carry no structure
		return res, out
	}
	if res, out := call("run", map[string]any{"command": []string{"sh", "-c", nt.swap()}}); res.IsError {
		t.Fatalf("swap: %v", out)
	}
	if res, out := call("read_file", map[string]any{"path": nt.ws + "/a/data/secret.txt"}); !res.IsError || strings.Contains(fmt.Sprint(out), "HOST") {
		t.Fatalf("read_file through the swapped ancestor = isError %v, %v", res.IsError, out)
	}
	if res, out := call("read_file", map[string]any{"path": nt.ws + "/a/data/granted.txt"}); res.IsError || out["content"] != "granted\n" {
		t.Fatalf("read_file of the real grant = isError %v, %v", res.IsError, out)
	}
	if res, out := call("write_file", map[string]any{"path": nt.ws + "/b/out/config.sh", "content": "from MCP\n"}); res.IsError {
		t.Fatalf("write_file into the real grant: %v", out)
	}
	if res, out := call("list_files", map[string]any{"path": nt.ws + "/a/data"}); res.IsError || !strings.Contains(fmt.Sprint(out), "granted.txt") {
		t.Fatalf("list_files of the real grant = isError %v, %v", res.IsError, out)
	}
	// A single-file grant reads like any file.
	if res, out := call("read_file", map[string]any{"path": single}); res.IsError || out["content"] != "notes\n" {
		t.Fatalf("read_file of a single-file grant = isError %v, %v (before: not a directory)", res.IsError, out)
	}
	cs.Close() // waits for the server, which copies the writes back as it ends
	nt.checkHost(t)
	if b, _ := os.ReadFile(nt.ws + "/b/out/config.sh"); string(b) != "from MCP\n" {
		t.Errorf("write_file did not reach the real grant when the server ended: %q\n%s", b, stderr.String())
	}
}
