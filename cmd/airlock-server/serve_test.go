//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestServeTokens(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	text := "# tenants\n\n  old-style-token-0123456789  \ntenant-a-0123456789 ceiling=a.yaml\ntenant-b-0123456789\tceiling=/etc/airlock/b c.yaml\n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := serveTokens(file, "ignored-env-token")
	if err != nil {
		t.Fatal(err)
	}
	want := []serveToken{
		{token: "old-style-token-0123456789", line: 3},
		{token: "tenant-a-0123456789", ceiling: filepath.Join(dir, "a.yaml"), line: 4},
		{token: "tenant-b-0123456789", ceiling: "/etc/airlock/b c.yaml", line: 5},
	}
	if !slices.Equal(got, want) {
		t.Errorf("serveTokens = %+v, want %+v", got, want)
	}
	if got, err := serveTokens("", " env-token-0123456789 "); err != nil || !slices.Equal(got, []serveToken{{token: "env-token-0123456789"}}) {
		t.Errorf("serveTokens(env) = %+v, %v", got, err)
	}
}

// TestServeTokensErrors: a malformed line is refused with its number, and
// the message never shows the token.
func TestServeTokensErrors(t *testing.T) {
	for _, tt := range []struct{ name, text string }{
		{"unknown-field", "secret-token-0123456789 policy=x.yaml\n"},
		{"empty-ceiling", "secret-token-0123456789 ceiling=\n"},
		{"two-tokens", "secret-token-0123456789 secret-token-9876543210\n"},
		{"no-token", "# only a comment\n\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(file, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := serveTokens(file, "")
			if err == nil {
				t.Fatal("serveTokens = nil error")
			}
			if strings.Contains(err.Error(), "secret-token") {
				t.Errorf("error shows the token: %v", err)
			}
			if tt.name != "no-token" && !strings.Contains(err.Error(), "line 1") {
				t.Errorf("error %q does not name line 1", err)
			}
		})
	}
}

// TestServeRefusesBadCeiling: airlock serve does not start with a ceiling
// that is missing or invalid, and says which.
func TestServeRefusesBadCeiling(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nfs_reed: [/x]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("token-0123456789abcdef ceiling=missing.yaml\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"invalid", []string{"--ceiling", bad, "--insecure-no-auth"}, "unknown key \"fs_reed\""},
		{"missing", []string{"--ceiling", filepath.Join(dir, "nope.yaml"), "--insecure-no-auth"}, "no such file"},
		{"token-missing", []string{"--token-file", tokens}, "line 1: ceiling"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a server that starts is killed, and fails the test
			defer cancel()
			cmd := exec.CommandContext(ctx, serverBin, append([]string{"serve", "--listen", "127.0.0.1:0"}, tt.args...)...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tt.want) || strings.Contains(string(out), "listening") {
				t.Errorf("airlock serve %q = %v:\n%s\nwant a refusal containing %q", tt.args, err, out, tt.want)
			}
		})
	}
}

// TestServeRefusesBadLimits: airlock serve does not start with transfer or
// exec limits that are out of range, and says which.
func TestServeRefusesBadLimits(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"bytes-below-body", []string{"--max-transfer-bytes", "1MiB"}, "cannot hold one upload"},
		{"bytes-below-big-body", []string{"--max-body", "512MiB", "--max-transfer-bytes", "256MiB"}, "cannot hold one upload"},
		{"total-below-token", []string{"--max-transfers", "9", "--max-transfers-total", "8"}, "less than 9 per token"},
		{"bytes-total-below-token", []string{"--max-transfer-bytes", "256MiB", "--max-transfer-bytes-total", "64MiB"}, "less than 268435456 per token"},
		{"zero-transfers", []string{"--max-transfers", "0"}, "--max-transfers"},
		{"zero-execs", []string{"--max-execs", "0"}, "--max-execs"},
		{"bad-size", []string{"--max-transfer-bytes", "lots"}, "--max-transfer-bytes \"lots\""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a server that starts is killed, and fails the test
			defer cancel()
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--insecure-no-auth", "--warm-pool", "0"}, tt.args...)
			out, err := exec.CommandContext(ctx, serverBin, args...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tt.want) || strings.Contains(string(out), "listening") {
				t.Errorf("airlock serve %q = %v:\n%s\nwant a refusal containing %q", tt.args, err, out, tt.want)
			}
		})
	}
}
