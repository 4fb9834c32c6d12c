package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

func TestInitNextTo(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(dir string) error
		useInit bool
	}{
		{"absent", func(string) error { return nil }, false},
		{"good", func(d string) error { return os.WriteFile(filepath.Join(d, InitBinary), []byte("x"), 0o755) }, true},
		{"world-writable", func(d string) error {
			p := filepath.Join(d, InitBinary)
			if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
				return err
			}
			return os.Chmod(p, 0o757)
		}, false},
		{"group-writable", func(d string) error {
			p := filepath.Join(d, InitBinary)
			if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
				return err
			}
			return os.Chmod(p, 0o775)
		}, false},
		{"not-executable", func(d string) error { return os.WriteFile(filepath.Join(d, InitBinary), []byte("x"), 0o644) }, false},
		{"symlink", func(d string) error { return os.Symlink("/bin/true", filepath.Join(d, InitBinary)) }, false},
		{"directory", func(d string) error { return os.Mkdir(filepath.Join(d, InitBinary), 0o755) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			self := filepath.Join(dir, "airlock")
			if err := os.WriteFile(self, []byte("x"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := tt.setup(dir); err != nil {
				t.Fatal(err)
			}
			f := openInitNextTo(self)
			if f != nil {
				defer f.Close()
			}
			if (f != nil) != tt.useInit {
				t.Errorf("openInitNextTo(%s) = %v, want an init binary: %v", tt.name, f, tt.useInit)
			}
		})
	}
	if _, err := openInit("/nonexistent/init"); err == nil {
		t.Error("openInit of a configured binary that does not exist succeeded")
	}
}
