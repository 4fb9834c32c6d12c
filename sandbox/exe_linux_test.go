package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
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

// TestRunWithoutInit: a program that forgot sandbox.Init (and has no
// airlock-init beside it) is refused with an error that names Init, before
// anything starts (before: a cryptic cgroup error).
func TestRunWithoutInit(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		airtest.SkipOrFail(t, "no go toolchain to build the program: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "noinit")
	if out, err := exec.Command(goBin, "build", "-o", bin, "./testdata/noinit").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, _ := exec.Command(bin).CombinedOutput()
	if !strings.Contains(string(out), "exit 125") || !strings.Contains(string(out), "sandbox.Init()") {
		t.Fatalf("a run without sandbox.Init: %s; want exit 125 naming sandbox.Init()", out)
	}
}
