package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestEnvironmentLookupStaysInRoot: every path an environment's tools and
// loaders resolve to is inside its root filesystem, whatever its symlinks
// say: an absolute link starts again at the root, .. stops there, loops
// end, and the host's own executables are never found in its place.
func TestEnvironmentLookupStaysInRoot(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(root+p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := func(p string, mode os.FileMode) {
		if err := os.WriteFile(root+p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.Symlink(target, root+p); err != nil {
			t.Fatal(err)
		}
	}
	mk("/usr/bin")
	mk("/usr/lib")
	mk("/opt/real")
	file("/usr/bin/tool", 0o755)
	file("/opt/real/tool2", 0o755)
	link("usr/bin", "/bin")
	link("/usr/bin/sh", "/usr/bin/hostsh")               // the host's /usr/bin/sh exists; the root's does not
	link("../../../../../../usr/bin/jq", "/usr/bin/jq2") // climbs above the root
	link("/opt/real", "/usr/lib/opt")                    // absolute, inside the root
	link("/usr/lib/opt/tool2", "/usr/bin/viaopt")
	link("loop", "/usr/bin/loop")
	link("/etc/shadow", "/usr/bin/shadow")

	h := &hostFS{root: root}
	for _, tt := range []struct {
		name, inside, real string
		notFound           bool
	}{
		{name: "tool", inside: "/usr/local/bin/tool", notFound: true}, // not on the first PATH entry: the next ones
		{name: "/bin/tool", inside: "/usr/bin/tool", real: root + "/usr/bin/tool"},
		{name: "viaopt", inside: "/usr/bin/viaopt", real: root + "/opt/real/tool2"},
		{name: "hostsh", notFound: true},
		{name: "jq2", notFound: true},
		{name: "loop", notFound: true},
		{name: "shadow", notFound: true},
		{name: "/etc/shadow", notFound: true},
	} {
		inside, real, err := h.LookTool(tt.name)
		if tt.name == "tool" {
			// Found on /usr/bin after /usr/local/bin is absent.
			if err != nil || real != root+"/usr/bin/tool" || inside != "/usr/bin/tool" {
				t.Errorf("LookTool(tool) = %q %q %v", inside, real, err)
			}
			continue
		}
		if tt.notFound {
			if err == nil {
				t.Errorf("LookTool(%q) = %q %q: found a file outside the environment", tt.name, inside, real)
			} else if !errors.Is(err, ErrNotFound) {
				t.Errorf("LookTool(%q) error %v, want ErrNotFound", tt.name, err)
			}
			continue
		}
		if err != nil || inside != tt.inside || real != tt.real {
			t.Errorf("LookTool(%q) = %q %q %v, want %q %q", tt.name, inside, real, err, tt.inside, tt.real)
		}
	}
	if r, err := resolveIn(root, "/usr/bin/jq2"); err == nil {
		t.Errorf("resolveIn climbed to %q", r)
	}
	if r, err := resolveIn(root, "/../../..//usr/lib/opt/../real/tool2"); err != nil || r != "/opt/real/tool2" {
		t.Errorf("resolveIn(.. above the root) = %q %v", r, err)
	}
	if _, err := resolveIn(root, "/usr/bin/loop"); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("resolveIn(loop) = %v, want ELOOP", err)
	}

	// A symlink above a system folder would let the host's own stand in.
	other := t.TempDir()
	if err := os.MkdirAll(other+"/usr", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/lib", other+"/usr/lib"); err != nil {
		t.Fatal(err)
	}
	if _, err := newHostFS(other); err == nil {
		t.Errorf("newHostFS accepted a root whose /usr/lib is a symlink to the host's")
	}
	if err := os.Symlink("/usr", root+"/usr/local"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := h.Lstat(root + "/usr/local/lib"); err == nil || !strings.Contains(err.Error(), "/usr/local is a symlink") {
		t.Errorf("Lstat through ROOT/usr/local -> /usr: %v, want a refusal", err)
	}
}

// TestEnvironmentRootChecked: a root that is missing, a file, reached
// through a symlink, writable by others, or without /usr/lib is refused
// before anything is compiled, each with what to do.
func TestEnvironmentRootChecked(t *testing.T) {
	good := t.TempDir()
	for _, d := range []string{"/usr/lib"} {
		if err := os.MkdirAll(good+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(good, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := newHostFS(good); err != nil {
		t.Fatalf("a good root: %v", err)
	}
	linked := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(good, linked); err != nil {
		t.Fatal(err)
	}
	bare := t.TempDir()
	open := t.TempDir()
	if err := os.MkdirAll(open+"/usr/lib", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	afile := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(afile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ root, want string }{
		{good + "/missing", "no such file"},
		{afile, "is not a folder"},
		{linked, "goes through a symlink"},
		{open, "writable by its group or others"},
		{bare, "has no /usr folder"},
	} {
		if _, err := newHostFS(tt.root); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("newHostFS(%s) = %v, want %q", tt.root, err, tt.want)
		}
	}
}
