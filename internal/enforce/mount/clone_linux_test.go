package mount

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// oldCloneAttr is the attribute rule Clone applied before the plan carried
// Devices and Recursive: nodev except for binds under /dev, read-only for
// the lower layer of staged grants, always recursive.
func oldCloneAttr(m plan.Mount) uint64 {
	attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if m.Kind == plan.KindBind && strings.HasPrefix(m.Target, "/dev/") {
		attr = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC
	}
	if !m.Writable || m.Kind == plan.KindOverlay || m.Kind == plan.KindStagedFile {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	if !m.Exec {
		attr |= unix.MOUNT_ATTR_NOEXEC
	}
	return attr
}

// host is a small merged-/usr host for Compile.
type host struct{}

func (host) Lstat(p string) (bool, bool, string, error) {
	switch p {
	case "/bin", "/lib":
		return true, false, "usr" + p, nil
	case "/usr/lib", "/data", "/data/out":
		return true, true, "", nil
	case "/etc/ld.so.cache", "/data/notes.txt":
		return true, false, "", nil
	}
	return false, false, "", nil
}
func (host) LookTool(name string) (string, string, error) { return "/usr/bin/sh", "/usr/bin/dash", nil }
func (host) Loader() []string                             { return nil }
func (host) Env(string) (string, bool)                    { return "", false }

// TestCloneAttrUnchanged checks that the flags Clone derives from the plan
// are the ones it set before, for every bind a plan holds, and that every
// clone stays recursive.
func TestCloneAttrUnchanged(t *testing.T) {
	p, err := policyFor()
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(p, plan.Request{Argv: []string{"sh"}, CommandIsGranted: true}, host{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range pl.Mounts {
		if !m.Cloned() {
			continue
		}
		n++
		got, err := CloneAttr(m)
		if err != nil || got != oldCloneAttr(m) {
			t.Errorf("CloneAttr(%s %s) = %#x, %v; want %#x", m.Kind, m.Target, got, err, oldCloneAttr(m))
		}
		if !m.Recursive {
			t.Errorf("%s %s is not recursive: Clone used to pass AT_RECURSIVE for every bind", m.Kind, m.Target)
		}
	}
	if n < 8 {
		t.Fatalf("the plan has %d binds; the test covers too little", n)
	}
}

// TestMountFlagsUnchanged checks the flags of the steps that are not
// clones against the ones the Builder hard-coded before they came from the
// plan.
func TestMountFlagsUnchanged(t *testing.T) {
	const was = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	p, err := policyFor()
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(p, plan.Request{Argv: []string{"sh"}, CommandIsGranted: true}, host{})
	if err != nil {
		t.Fatal(err)
	}
	pl.Mounts = append(pl.Mounts,
		plan.Mount{Kind: plan.KindStagedFile, Source: "/data/f", Target: "/data/f", Writable: true, File: true, Origin: plan.OriginFSWrite},
		plan.Mount{Kind: plan.KindReadonly, Target: "/data/out/.git/hooks", Dir: true, Origin: plan.OriginSandbox})
	seen := map[plan.Kind]bool{}
	for _, m := range pl.Mounts {
		want, ok := map[plan.Kind]uintptr{plan.KindOverlay: was, plan.KindStagedFile: was, plan.KindReadonly: was | unix.MS_RDONLY}[m.Kind]
		if !ok {
			continue
		}
		seen[m.Kind] = true
		if got := MountFlags(m); got != want {
			t.Errorf("MountFlags(%s %s) = %#x, want %#x", m.Kind, m.Target, got, want)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("covered %v, want overlay, staged-file and readonly", seen)
	}
}

// TestCloneAttrRefusesDevicesOnGrants: only the sandbox's own device binds
// may keep device nodes; a grant that asked would expose the host's.
func TestCloneAttrRefusesDevicesOnGrants(t *testing.T) {
	for _, m := range []plan.Mount{
		{Kind: plan.KindBind, Source: "/data", Target: "/data", Devices: true, Origin: plan.OriginFSRead},
		{Kind: plan.KindOverlay, Source: "/data/out", Target: "/data/out", Writable: true, Devices: true, Origin: plan.OriginFSWrite},
		{Kind: plan.KindBind, Source: "/usr/bin/dash", Target: "/usr/bin/sh", Devices: true, Origin: plan.OriginTool},
		{Kind: plan.KindTmpfs, Target: "/tmp", Origin: plan.OriginSandbox},
	} {
		if got, err := CloneAttr(m); err == nil {
			t.Errorf("CloneAttr(%+v) = %#x, nil error; want a refusal", m, got)
		}
	}
}

func policyFor() (*policy.Policy, error) {
	return policy.New(policy.Spec{FSRead: []string{"/data", "/data/notes.txt"}, FSWrite: []string{"/data/out"}})
}
