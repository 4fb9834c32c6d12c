package controller

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// staticProgram builds a small static Go program into dir as name.
func staticProgram(t *testing.T, dir, name string) {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module x\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

// TestInstall: Install copies airlock and airlock-init from the
// installer's folder, read-only and executable, writes the policy, and
// refuses what would let the enforcer be anything but the operator's
// static programs: a dynamically linked one (its loader would come from
// the Sandbox's image), a symlink, a file already in the destination,
// a writable-by-others program, and a policy that is empty or too large.
func TestInstall(t *testing.T) {
	img := t.TempDir() // the operator's image's folder
	for _, name := range Installed {
		staticProgram(t, img, name)
	}
	self := filepath.Join(img, "airlock-controller")
	if err := os.WriteFile(self, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	pol := "version: 1\n"

	dst := t.TempDir()
	if err := Install(self, dst, pol); err != nil {
		t.Fatal(err)
	}
	for _, name := range Installed {
		fi, err := os.Stat(filepath.Join(dst, name))
		if err != nil || fi.Mode().Perm() != 0o555 {
			t.Errorf("%s installed: %v, mode %v; want 0555", name, err, fi.Mode())
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "policy.yaml")); err != nil || string(b) != pol {
		t.Errorf("policy.yaml = %q, %v; want the policy", b, err)
	}
	if err := Install(self, dst, pol); err == nil || !strings.Contains(err.Error(), "file exists") {
		t.Errorf("a second install into the same folder: %v, want it refused (file exists)", err)
	}

	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		pol   string
		want  string
	}{
		{"empty-policy", nil, "", "is 0 bytes"},
		{"huge-policy", nil, strings.Repeat("#", 64<<10+1), "want 1 to 65536"},
		{"dynamic", func(t *testing.T, dir string) {
			dyn := "/bin/true"
			if e, err := elf.Open(dyn); err != nil || !hasInterp(e) {
				t.Skipf("%s is not a dynamically linked ELF program here", dyn)
			}
			b, err := os.ReadFile(dyn)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "airlock"), b, 0o755); err != nil {
				t.Fatal(err)
			}
		}, pol, "dynamically linked"},
		{"symlink", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "airlock-init")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(img, "airlock-init"), filepath.Join(dir, "airlock-init")); err != nil {
				t.Fatal(err)
			}
		}, pol, "symbolic link"},
		{"writable", func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, "airlock"), 0o777); err != nil {
				t.Fatal(err)
			}
		}, pol, "writable"},
		{"missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "airlock")); err != nil {
				t.Fatal(err)
			}
		}, pol, "does not exist"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, name := range append([]string{"airlock-controller"}, Installed...) {
				b, err := os.ReadFile(filepath.Join(img, name))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			dst := t.TempDir()
			err := Install(filepath.Join(dir, "airlock-controller"), dst, tt.pol)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Install: %v, want an error naming %q", err, tt.want)
			}
			if ents, _ := os.ReadDir(dst); len(ents) > 1 {
				t.Errorf("a refused install left %d files", len(ents))
			}
		})
	}
}

func hasInterp(e *elf.File) bool {
	defer e.Close()
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}
