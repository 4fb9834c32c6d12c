package metabroker

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/plan"
)

// The broker is attacked end to end by the sandbox package's tests
// (sandbox/metaattack_linux_test.go and friends), through a real landlock
// sandbox; these test its parts.

// TestFilterHandsOverWhatTheBrokerAnswers: the landlock backend's profile
// notifies exactly the calls the broker answers on this architecture, and
// connect; a call notified that the broker does not know would be refused,
// and one the broker knows but the filter allows would bypass it.
func TestFilterHandsOverWhatTheBrokerAnswers(t *testing.T) {
	s := plan.WithoutNamespacesSeccomp(plan.DefaultSeccomp())
	var notified []string
	for _, sc := range s.Syscalls {
		for _, r := range sc.Rules {
			if r.Action == plan.ActNotify && sc.Name != "connect" {
				notified = append(notified, sc.Name)
			}
		}
	}
	own := Syscalls()
	for _, n := range own {
		if !slices.Contains(notified, n) {
			t.Errorf("the broker answers %s, but the filter does not hand it over", n)
		}
		if !slices.Contains(plan.MetadataSyscalls, n) {
			t.Errorf("the broker answers %s, which plan.MetadataSyscalls does not list", n)
		}
	}
	for _, n := range notified {
		if !slices.Contains(own, n) {
			t.Errorf("the filter hands over %s, which the broker does not answer on this architecture", n)
		}
	}
}

// TestProfileConstantsMatchKernelHeaders: the numbers the profile without
// namespaces spells out (plan cannot import x/sys) are the kernel's.
func TestProfileConstantsMatchKernelHeaders(t *testing.T) {
	s := plan.WithoutNamespacesSeccomp(plan.DefaultSeccomp())
	conds := map[string][]uint64{}
	for _, sc := range s.Syscalls {
		for _, r := range sc.Rules {
			for _, c := range r.Conds {
				conds[sc.Name] = append(conds[sc.Name], c.Value)
			}
		}
	}
	for _, c := range []struct {
		call string
		want uint64
	}{
		{"ioctl", unix.FS_IOC_SETFLAGS}, {"ioctl", unix.FS_IOC_ENABLE_VERITY}, {"ioctl", unix.FS_IOC_SET_ENCRYPTION_POLICY},
		// x/sys lacks these: linux/fs.h's _IOW(type, nr, size).
		{"ioctl", iow('X', 32, 28)}, // FS_IOC_FSSETXATTR, struct fsxattr
		{"ioctl", iow('v', 2, 8)},   // FS_IOC_SETVERSION, long
		{"ioctl", iow('f', 2, 4)},   // FS_IOC32_SETFLAGS, int
		{"ioctl", iow('v', 2, 4)},   // FS_IOC32_SETVERSION, int
		{"openat", unix.O_CREAT}, {"openat", unix.O_TMPFILE &^ unix.O_DIRECTORY},
		{"openat", unix.S_ISUID}, {"openat", unix.S_ISGID}, {"mknodat", unix.S_ISUID},
		{"fallocate", unix.FALLOC_FL_KEEP_SIZE | unix.FALLOC_FL_PUNCH_HOLE},
	} {
		if !slices.Contains(conds[c.call], c.want) {
			t.Errorf("the profile's %s rules do not test %#x: %#x", c.call, c.want, conds[c.call])
		}
	}
	for _, sc := range s.Syscalls {
		if sc.Name == "fallocate" {
			if e, ok := sc.Rules[len(sc.Rules)-1].Action.Errno(); !ok || e != uint16(unix.EOPNOTSUPP) {
				t.Errorf("fallocate's last rule is %v, want errno EOPNOTSUPP", sc.Rules[len(sc.Rules)-1].Action)
			}
		}
	}
}

// iow is _IOW(typ, nr, size) of asm-generic/ioctl.h, which amd64 and
// arm64 use.
func iow(typ, nr, size uint64) uint64 { return 1<<30 | size<<16 | typ<<8 | nr }

func TestUnder(t *testing.T) {
	for _, c := range []struct {
		root, p, rel string
		ok           bool
	}{
		{"/a/b", "/a/b", "", true}, {"/a/b", "/a/b/c", "c", true}, {"/a/b", "/a/bc", "", false},
		{"/a/b", "/a", "", false}, {"", "/x/y", "x/y", true}, {"/a/b", "/a/b/c/../d", "c/../d", true},
	} {
		if rel, ok := under(c.root, c.p); rel != c.rel || ok != c.ok {
			t.Errorf("under(%q, %q) = %q, %v; want %q, %v", c.root, c.p, rel, ok, c.rel, c.ok)
		}
	}
}

func TestProcSelfFD(t *testing.T) {
	for p, want := range map[string]int{"/proc/self/fd/3": 3, "/proc/thread-self/fd/12": 12} {
		if n, ok := procSelfFD(p); !ok || n != want {
			t.Errorf("procSelfFD(%q) = %d, %v", p, n, ok)
		}
	}
	for _, p := range []string{"/proc/self/fd/", "/proc/self/fd/+3", "/proc/self/fd/-1", "/proc/self/fd/3/x", "/proc/1/fd/3", "/proc/self/fd/99999999999", "proc/self/fd/3"} {
		if _, ok := procSelfFD(p); ok {
			t.Errorf("procSelfFD(%q) accepted it", p)
		}
	}
}

// TestBeneath: a file is beneath a grant when it is linked there now; a
// grant replaced after New is not one any more, whatever its path.
func TestBeneath(t *testing.T) {
	root := t.TempDir()
	g := filepath.Join(root, "g")
	out := filepath.Join(root, "out")
	for _, d := range []string{filepath.Join(g, "sub"), out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(g, "sub", "f"), filepath.Join(out, "f"), filepath.Join(root, "g (deleted)")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := New(Config{Grants: []string{g}, Identity: Identity{UID: os.Getuid(), GID: os.Getgid()}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	open := func(p string) int {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	for p, want := range map[string]bool{g: true, filepath.Join(g, "sub"): true, filepath.Join(g, "sub", "f"): true,
		filepath.Join(out, "f"): false, root: false, filepath.Join(root, "g (deleted)"): false} {
		if where, ok := b.beneath(open(p)); ok != want || where != p {
			t.Errorf("beneath(%s) = %q, %v; want %v", p, where, ok, want)
		}
	}
	// The grant moves away and another folder takes its name: the path
	// matches, the inode found beneath the grant's fd does not.
	inside := open(filepath.Join(g, "sub", "f"))
	if err := os.Rename(g, filepath.Join(root, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(g, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g, "sub", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if where, ok := b.beneath(open(filepath.Join(g, "sub", "f"))); ok {
		t.Errorf("a file of the folder that took the grant's name is beneath it (%s)", where)
	}
	// And the moved grant's own files are refused too: the grant is its
	// path and the inode the broker opened there, and neither holds them
	// any more (failing closed: the sandbox cannot move a grant, only the
	// host can).
	if where, ok := b.beneath(inside); ok {
		t.Errorf("a file of the moved grant is still beneath it (%s)", where)
	}
	// An unlinked file has no place beneath the grant.
	gone := open(filepath.Join(root, "moved", "sub", "f"))
	if err := os.Remove(filepath.Join(root, "moved", "sub", "f")); err != nil {
		t.Fatal(err)
	}
	if where, ok := b.beneath(gone); ok {
		t.Errorf("an unlinked file is beneath the grant (%s)", where)
	}
}

// TestIdentityDo: the function runs with the identity's ids, no
// supplementary groups and no capabilities, and the thread is not reused.
func TestIdentityDo(t *testing.T) {
	airtest.RequireRoot(t)
	id := Identity{UID: 54329, GID: 54328}
	var got [4]uint32
	var caps [2]unix.CapUserData
	var groups []int
	err := id.Do(func() error {
		got[0], got[1], _ = getres(unix.SYS_GETRESUID)
		got[2], got[3], _ = getres(unix.SYS_GETRESGID)
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		if err := unix.Capget(&hdr, &caps[0]); err != nil {
			return err
		}
		var err error
		groups, err = unix.Getgroups()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != [4]uint32{54329, 54329, 54328, 54328} || caps[0].Effective|caps[0].Permitted|caps[1].Effective|caps[1].Permitted != 0 || len(groups) != 0 {
		t.Fatalf("ids %v, capabilities %+v, groups %v", got, caps, groups)
	}
	// The test's own thread is still root.
	if unix.Geteuid() != 0 {
		t.Fatal("the credentials leaked to another thread")
	}
	// A file root could write is not the identity's to write.
	f := filepath.Join(t.TempDir(), "root-only")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := id.Do(func() error { return unix.Chmod(f, 0o666) }); err == nil {
		t.Fatal("the identity chmodded a file of root's")
	}
}
