package policy_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

func TestNarrowingValidation(t *testing.T) {
	tests := []struct {
		name, yaml string
		wantErr    string // "" = valid
	}{
		{"deny-inside-read", "version: 1\nfs_read: [/ws]\nfs_deny: [/ws/secrets]\n", ""},
		{"deny-inside-write", "version: 1\nfs_write: [/ws]\nfs_deny: [/ws/.env]\n", ""},
		{"deny-outside", "version: 1\nfs_read: [/ws]\nfs_deny: [/etc]\n", "outside every fs_read and fs_write grant"},
		{"deny-prefix-not-inside", "version: 1\nfs_read: [/ws]\nfs_deny: [/wsx/a]\n", "outside every"},
		{"deny-dotdot", "version: 1\nfs_read: [/ws]\nfs_deny: [/ws/../etc]\n", "outside every"},
		{"deny-grant-itself", "version: 1\nfs_read: [/ws]\nfs_deny: [/ws]\n", "is a grant itself"},
		{"grant-inside-deny", "version: 1\nfs_read: [/ws, /ws/a/b]\nfs_deny: [/ws/a]\n", "lies inside fs_deny"},
		{"protect-inside-write", "version: 1\nfs_write: [/ws]\nfs_protect: [/ws/Makefile]\n", ""},
		{"protect-in-read-only", "version: 1\nfs_read: [/ws]\nfs_protect: [/ws/Makefile]\n", "not inside an fs_write grant"},
		{"protect-whole-grant", "version: 1\nfs_write: [/ws]\nfs_protect: [/ws]\n", "move the grant to fs_read"},
		{"unprotect-builtin", "version: 1\nfs_write: [/ws]\nfs_unprotect: [/ws/.vscode]\n", ""},
		{"unprotect-not-builtin", "version: 1\nfs_write: [/ws]\nfs_unprotect: [/ws/src]\n", "not on the built-in protected list"},
		{"unprotect-nested-builtin-path", "version: 1\nfs_write: [/ws]\nfs_unprotect: [/ws/sub/.vscode]\n", "not on the built-in protected list"},
		{"write-grant-inside-protected", "version: 1\nfs_write: [/ws, /ws/.git/hooks]\n", "lies inside the protected path"},
		{"write-grant-inside-unprotected", "version: 1\nfs_write: [/ws, /ws/.git/hooks]\nfs_unprotect: [/ws/.git/hooks]\n", ""},
		{"max-write-above-memory", "version: 1\nbudget:\n  max_write: 1GiB\n  max_memory: 512MiB\n", "larger than max_memory"},
		{"max-write-explicit", "version: 1\nbudget:\n  max_write: 100MiB\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.Parse([]byte(tt.yaml), policy.ParseOptions{})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Parse(%q) = %v, want no error", tt.yaml, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Parse(%q) = %v, want an error containing %q", tt.yaml, err, tt.wantErr)
			}
		})
	}
}

func TestMaxWriteDefault(t *testing.T) {
	p, err := policy.Parse([]byte("version: 1\nbudget:\n  max_memory: 128MiB\n"), policy.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Budget().Write; got != 64<<20 {
		t.Errorf("max_write with max_memory 128MiB = %d, want 64MiB (half of it)", got)
	}
	if got := policy.Default().Budget().Write; got != 256<<20 {
		t.Errorf("default max_write = %d, want 256MiB", got)
	}
}

func TestProtectionsAndCanWrite(t *testing.T) {
	p, err := policy.Parse([]byte("version: 1\nfs_write: [/ws]\nfs_protect: [/ws/ci.sh]\nfs_unprotect: [/ws/.vscode]\nfs_deny: [/ws/.env]\n"), policy.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path      string
		canWrite  bool
		canRead   bool
		protected bool
	}{
		{"/ws/main.py", true, true, false},
		{"/ws/.git/hooks/post-checkout", false, true, true},
		{"/ws/.git/config", false, true, true},
		{"/ws/.git/objects/ab/cdef", true, true, false},
		{"/ws/.envrc", false, true, true},
		{"/ws/.vscode/settings.json", true, true, false},
		{"/ws/ci.sh", false, true, true},
		{"/ws/.env", false, false, false},
		{"/ws/.env/x", false, false, false},
	}
	for _, tt := range tests {
		if got := p.CanWrite(tt.path); got != tt.canWrite {
			t.Errorf("CanWrite(%q) = %v, want %v", tt.path, got, tt.canWrite)
		}
		if got := p.CanRead(tt.path); got != tt.canRead {
			t.Errorf("CanRead(%q) = %v, want %v", tt.path, got, tt.canRead)
		}
		if got := p.ProtectedBy(tt.path) != nil; got != tt.protected {
			t.Errorf("ProtectedBy(%q) != nil = %v, want %v", tt.path, got, tt.protected)
		}
	}
	if err := p.CheckWrite("/", "/ws/.bashrc"); err == nil || !strings.Contains(err.Error(), "protected") {
		t.Errorf("CheckWrite(/ws/.bashrc) = %v, want a protected-path denial", err)
	}
}

func TestWriteBackRefusal(t *testing.T) {
	p, err := policy.Parse([]byte("version: 1\nfs_write: [/ws]\nfs_protect: [/ws/ci.sh]\nfs_unprotect: [/ws/.vscode]\nfs_deny: [/ws/.env]\n"), policy.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		refused bool
	}{
		{"/ws/main.py", false},
		{"/ws/src/app/main.go", false},
		{"/ws/.git", false}, // the folder itself: git init is allowed
		{"/ws/.git/objects/ab/cdef", false},
		{"/ws/.git/HEAD", false},
		{"/ws/.git/hooks", true},
		{"/ws/.git/hooks/pre-commit", true},
		{"/ws/.git/config", true},
		{"/ws/.git/commondir", true},
		{"/ws/.GIT/Hooks/pre-commit", true},
		{"/ws/sub/.git/hooks/post-checkout", true},
		{"/ws/sub/.git/config", true},
		{"/ws/.git/modules/lib/hooks/post-checkout", true},
		{"/ws/.git/modules/lib/config", true},
		{"/ws/.git/worktrees/w/config.worktree", true},
		{"/ws/bare.git/hooks/update", true},
		{"/ws/bare.git/config", true},
		{"/ws/config", false},
		{"/ws/hooks/x", false},
		{"/ws/.envrc", true},
		{"/ws/deep/er/.envrc", true},
		{"/ws/.vscode/tasks.json", false}, // fs_unprotect
		{"/ws/sub/.vscode/tasks.json", true},
		{"/ws/.github/workflows/ci.yml", true},
		{"/ws/.github/CODEOWNERS", false},
		{"/ws/ci.sh", true},
		{"/ws/.env", true},
		{"/ws/.env/x", true},
		{"/elsewhere/x", true},
	}
	for _, tt := range tests {
		if got := p.WriteBackRefusal(tt.path) != ""; got != tt.refused {
			t.Errorf("WriteBackRefusal(%q) = %q, want refused=%v", tt.path, p.WriteBackRefusal(tt.path), tt.refused)
		}
	}
}
