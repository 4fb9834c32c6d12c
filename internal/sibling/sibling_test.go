package sibling_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/sibling"
)

// nobody is the uid that owns the "other-owner" case's file.
const nobody = 65534

// TestOpen: a sibling is opened only when it is a regular, executable
// file of its own in the running program's resolved folder, owned by that
// program's owner or root and writable by nobody else; each refusal says
// why.
func TestOpen(t *testing.T) {
	const name = "airlock-server"
	write := func(mode os.FileMode) func(string) error {
		return func(d string) error {
			p := filepath.Join(d, name)
			if err := os.WriteFile(p, []byte("x"), 0o700); err != nil {
				return err
			}
			return os.Chmod(p, mode) // past the umask
		}
	}
	tests := []struct {
		name  string
		setup func(dir string) error
		root  bool   // needs root (chown)
		want  string // "" when the file is trusted; else in the error
	}{
		{"good", write(0o755), false, ""},
		{"owner-only", write(0o700), false, ""},
		{"absent", func(string) error { return nil }, false, "does not exist"},
		{"world-writable", write(0o757), false, "writable by group or others (mode 0757)"},
		{"group-writable", write(0o775), false, "writable by group or others (mode 0775)"},
		{"not-executable", write(0o644), false, "not executable (mode 0644)"},
		{"symlink", func(d string) error { return os.Symlink("/bin/true", filepath.Join(d, name)) }, false, "is a symbolic link"},
		{"symlink-to-sibling", func(d string) error {
			if err := write(0o755)(d); err != nil {
				return err
			}
			if err := os.Rename(filepath.Join(d, name), filepath.Join(d, "real")); err != nil {
				return err
			}
			return os.Symlink("real", filepath.Join(d, name))
		}, false, "is a symbolic link"},
		{"directory", func(d string) error { return os.Mkdir(filepath.Join(d, name), 0o755) }, false, "not a regular file"},
		{"fifo", func(d string) error { return syscall.Mkfifo(filepath.Join(d, name), 0o755) }, false, "not a regular file"},
		{"other-owner", func(d string) error {
			if err := write(0o755)(d); err != nil {
				return err
			}
			return os.Chown(filepath.Join(d, name), nobody, nobody)
		}, true, "owned by uid 65534, neither root nor the owner of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				airtest.RequireRoot(t)
			}
			dir := t.TempDir()
			self := filepath.Join(dir, "airlock")
			if err := os.WriteFile(self, []byte("x"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := tt.setup(dir); err != nil {
				t.Fatal(err)
			}
			f, err := sibling.Open(self, name)
			if f != nil {
				defer f.Close()
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Open(%s) = %v, want the file", tt.name, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Open(%s) = %v, want an error saying %q", tt.name, err, tt.want)
			}
			var se *sibling.Error
			if tt.want != "" && (!errors.As(err, &se) || se.Path != filepath.Join(dir, name)) {
				t.Errorf("Open(%s) = %#v, want a *sibling.Error for %s", tt.name, err, filepath.Join(dir, name))
			}
			if got := errors.Is(err, fs.ErrNotExist); got != (tt.name == "absent") {
				t.Errorf("Open(%s): errors.Is(err, fs.ErrNotExist) = %v", tt.name, got)
			}
		})
	}
}

// TestOpenResolvesSelf: the sibling is looked for next to the running
// program's resolved path, not next to a symlink that names it.
func TestOpenResolvesSelf(t *testing.T) {
	realDir, link := t.TempDir(), t.TempDir()
	self := filepath.Join(realDir, "airlock")
	for _, p := range []string{self, filepath.Join(link, "airlock-server")} {
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(self, filepath.Join(link, "airlock")); err != nil {
		t.Fatal(err)
	}
	if f, err := sibling.Open(filepath.Join(link, "airlock"), "airlock-server"); err == nil || !strings.Contains(err.Error(), filepath.Join(realDir, "airlock-server")) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("Open through a symlink = %v, want the resolved folder %s searched and nothing found", err, realDir)
	}
}
