package server_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/server"
)

func TestFiles(t *testing.T) {
	ws := t.TempDir()
	e := newEnv(t, server.Config{})
	id := e.create(tokA, wsPolicy(ws))
	base := "/v1/sessions/" + id + "/files"

	resp, body := e.do("PUT", base+"/in/data.csv", tokA, "a,b\n1,2\n")
	if resp.StatusCode != 200 {
		t.Fatalf("upload = %d %s", resp.StatusCode, body)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "in", "data.csv")); err != nil || string(got) != "a,b\n1,2\n" {
		t.Fatalf("uploaded file = %q, %v", got, err)
	}
	resp, body = e.do("GET", base+"/in/data.csv", tokA, nil)
	if resp.StatusCode != 200 || string(body) != "a,b\n1,2\n" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("download = %d %q %s", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
	// An absolute path inside the workspace works too (after a double slash).
	resp, body = e.do("GET", base+"/"+ws+"/in/data.csv", tokA, nil)
	if resp.StatusCode != 200 || string(body) != "a,b\n1,2\n" {
		t.Errorf("download by absolute path = %d %q", resp.StatusCode, body)
	}

	resp, body = e.do("GET", base+"?dir=in", tokA, nil)
	var list struct {
		Entries []struct{ Name, Type, Mode string }
	}
	if err := json.Unmarshal(body, &list); resp.StatusCode != 200 || err != nil || len(list.Entries) != 1 || list.Entries[0].Name != "data.csv" || list.Entries[0].Type != "file" {
		t.Errorf("list = %d %s (%v)", resp.StatusCode, body, err)
	}
	resp, body = e.do("GET", base, tokA, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"name":"in","type":"dir"`) || !strings.Contains(string(body), `"dir":`+strconv.Quote(ws)) {
		t.Errorf("list workspace = %d %s, want dir %q (the path listed, as the OpenAPI document says)", resp.StatusCode, body, ws)
	}

	if resp, body := e.do("DELETE", base+"/in/data.csv", tokA, nil); resp.StatusCode != 204 {
		t.Errorf("delete = %d %s", resp.StatusCode, body)
	}
	resp, body = e.do("GET", base+"/in/data.csv", tokA, nil)
	e.wantError(resp, body, 404, "file_not_found")
	resp, body = e.do("DELETE", base+"/in/data.csv", tokA, nil)
	e.wantError(resp, body, 404, "file_not_found")

	if err := os.WriteFile(filepath.Join(ws, "in", "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	resp, body = e.do("DELETE", base+"/in", tokA, nil)
	e.wantError(resp, body, 409, "directory_not_empty")
}

// TestFileEscapes: "..", absolute paths outside the grants and symlinks
// that lead out are refused with 403 and a denial, and nothing changes.
func TestFileEscapes(t *testing.T) {
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{ws, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside/secret", filepath.Join(ws, "rel-link")); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, server.Config{})
	id := e.create(tokA, wsPolicy(ws))
	base := "/v1/sessions/" + id + "/files/"

	tests := []struct {
		name, method, path, rule string
	}{
		{"read-dotdot", "GET", "../outside/secret", "fs_read"},
		{"write-dotdot", "PUT", "../outside/secret", "fs_write"},
		{"write-dotdot-new", "PUT", "../outside/new", "fs_write"},
		{"write-dotdot-deep", "PUT", "a/../../outside/new", "fs_write"},
		{"delete-dotdot", "DELETE", "../outside/secret", "fs_write"},
		{"read-absolute", "GET", secret, "fs_read"},
		{"write-absolute", "PUT", "/" + outside + "/new", "fs_write"},
		{"read-etc", "GET", "/etc/passwd", "fs_read"},
		{"list-dotdot", "GET", "?dir=../outside", "fs_read"},
		{"list-absolute", "GET", "?dir=" + outside, "fs_read"},
		{"read-symlink-dir", "GET", "link/secret", "fs_read"},
		{"write-symlink-dir", "PUT", "link/new", "fs_write"},
		{"read-relative-symlink", "GET", "rel-link", "fs_read"},
		{"write-relative-symlink", "PUT", "rel-link", "fs_write"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := base + tt.path
			if strings.HasPrefix(tt.path, "?") {
				path = strings.TrimSuffix(base, "/") + tt.path
			}
			resp, body := e.do(tt.method, path, tokA, "pwned")
			ae := e.wantError(resp, body, 403, "denied")
			d := ae.Error.Denial
			if d == nil {
				t.Fatalf("403 without denial: %s", body)
			}
			if d.Layer != "fs" || d.Rule != tt.rule || d.Op == "" || d.Target == "" || d.Message == "" {
				t.Errorf("denial = %+v, want layer fs, rule %s and every field set", *d, tt.rule)
			}
			if ae.Error.Operator != nil || bytes.Contains(body, []byte("add \\\"")) {
				t.Errorf("the 403 tells the client how to widen its policy: %s", body)
			}
			if strings.Contains(ae.Error.Message, "pwned") {
				t.Errorf("message echoes the body: %q", ae.Error.Message)
			}
		})
	}
	if got, err := os.ReadFile(secret); err != nil || string(got) != "s3cret" {
		t.Errorf("secret = %q, %v; want it unchanged", got, err)
	}
	entries, err := os.ReadDir(outside)
	if err != nil || len(entries) != 1 {
		t.Errorf("outside holds %d entries (%v), want only the secret", len(entries), err)
	}
}
