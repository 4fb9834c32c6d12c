package writeback_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/writeback"
)

// FuzzWriteBack builds a random stage on the real file system (folders,
// files with holes, hard links, symlinks, fifos, sockets, devices,
// whiteouts, opaque and redirected folders, renames, set-id bits, names
// with control characters) over a host grant that holds symlinks out of
// it and, as root, a folder its owner may not write. Then it copies the
// stage back and checks: nothing outside the grant changed; the grant
// grew by no more than max_write (and two blocks of folder growth); no
// temporary file is left; every name and link target on the host is
// printable; nothing on the host is set-id, a device, fifo or socket;
// as root, everything new is the grant owner's and the owner's
// unwritable folder is as it was.
func FuzzWriteBack(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2, 3, 1, 4, 0}, uint16(64))
	f.Add([]byte{1, 0, 9, 200, 1, 1, 2, 1, 2, 2, 2, 3}, uint16(8))
	f.Add([]byte{0, 3, 7, 3, 1, 4, 5, 7, 0, 6, 3, 12, 7}, uint16(0))
	f.Add([]byte{5, 0, 5, 1, 10, 3, 8, 1, 4, 11, 2, 3, 9, 5, 2}, uint16(100))
	f.Add([]byte{0, 11, 7, 11, 1, 11, 9, 0, 1, 1, 1, 1, 1, 1, 1, 1}, uint16(4))
	f.Add([]byte{1, 0, 0, 4, 4, 100}, uint16(16))                             // 1 KiB of data in a 100 MiB file
	f.Add([]byte{1, 0, 0, 0, 255, 1, 2, 1, 0, 2, 2, 0, 2, 3, 0}, uint16(100)) // four names of a 64 KiB file
	f.Fuzz(func(t *testing.T, prog []byte, maxKiB uint16) {
		if len(prog) > 512 {
			prog = prog[:512]
		}
		d := t.TempDir()
		stage, host, outside := filepath.Join(d, "stage"), filepath.Join(d, "host"), filepath.Join(d, "outside")
		for _, p := range []string{filepath.Join(stage, "0", "upper"), filepath.Join(host, "b"), filepath.Join(host, "locked"), outside} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for p, s := range map[string]string{outside + "/secret": "OUTSIDE", host + "/a": "host a", host + "/b/c": "host c", host + "/locked/keep": "root's"} {
			if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for link, target := range map[string]string{host + "/c": "../outside", host + "/b/out": outside, host + "/lnk": outside + "/secret"} {
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
		}
		root := os.Geteuid() == 0
		const owner = 4242
		if root {
			for _, rel := range []string{"", "a", "b", "b/c", "c", "b/out", "lnk"} {
				if err := os.Lchown(filepath.Join(host, rel), owner, owner); err != nil {
					t.Fatal(err)
				}
			}
		}
		buildStage(filepath.Join(stage, "0", "upper"), prog)

		outBefore, lockedBefore := tree(t, outside), tree(t, filepath.Join(host, "locked"))
		use := diskUse(t, host)
		sfd, err := unix.Open(stage, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(sfd)
		hfd, err := writeback.OpenHost(host)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(hfd)
		maxBytes := int64(maxKiB%512) << 10
		res, rules := writeback.WriteBack(writeback.Config{StageFD: sfd, Grants: []writeback.Grant{{Host: host, Stage: "0", HostFD: hfd}}, MaxBytes: maxBytes})

		if len(rules) != len(res.Refused) {
			t.Errorf("%d rules for %d refusals", len(rules), len(res.Refused))
		}
		if got := tree(t, outside); got != outBefore {
			t.Errorf("outside the grant changed:\n%s\nwas\n%s", got, outBefore)
		}
		if ents, _ := os.ReadDir(d); len(ents) != 3 {
			t.Errorf("the grant's parent holds %v, want stage, host and outside", ents)
		}
		if grew := diskUse(t, host) - use; grew > maxBytes+8192 {
			t.Errorf("the grant grew by %d bytes on disk, max_write %d (result %+v)", grew, maxBytes, res)
		}
		if root {
			if got := tree(t, filepath.Join(host, "locked")); got != lockedBefore {
				t.Errorf("root's folder in the grant changed (the owner may not write there):\n%s\nwas\n%s", got, lockedBefore)
			}
		}
		err = filepath.Walk(host, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			name := fi.Name()
			st := fi.Sys().(*syscall.Stat_t)
			switch {
			case strings.HasPrefix(name, ".airlock-"):
				t.Errorf("temporary file left: %q", p)
			case !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }):
				t.Errorf("unprintable name reached the host: %q", p)
			case fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky|os.ModeDevice|os.ModeCharDevice|os.ModeNamedPipe|os.ModeSocket) != 0:
				t.Errorf("%q on the host is %v", p, fi.Mode())
			case root && st.Uid != owner && !strings.HasPrefix(p, filepath.Join(host, "locked")):
				t.Errorf("%q belongs to uid %d, want the grant's owner %d", p, st.Uid, owner)
			}
			if fi.Mode()&os.ModeSymlink != 0 {
				if l, _ := os.Readlink(p); !utf8.ValidString(l) || strings.ContainsFunc(l, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
					t.Errorf("symlink %q with an unprintable target %q reached the host", p, l)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// fuzzNames are the names a stage program picks from: few, so that they
// collide with each other and with the host's, git's, and unprintable
// ones.
var fuzzNames = []string{"a", "b", "c", "lnk", "locked", "keep", ".git", "HEAD", "objects", "hooks", "config", "esc\x1b[2J", "nl\nx", "bad\xff", "d"}

// buildStage lays out an upper folder from prog, as a sandbox could leave
// it. What the file system refuses is skipped.
func buildStage(upper string, prog []byte) {
	cwd := upper
	var files []string
	arg := func(i *int) int {
		*i++
		if *i < len(prog) {
			return int(prog[*i])
		}
		return 0
	}
	for i := 0; i < len(prog); i++ {
		op := prog[i] % 13
		name := filepath.Join(cwd, fuzzNames[arg(&i)%len(fuzzNames)])
		switch op {
		case 0:
			_ = os.Mkdir(name, os.FileMode(0o700|arg(&i)&0o77))
		case 1: // a file: data at up to two places of a sparse file
			// Never through a symlink, never blocked on a fifo.
			fd, err := unix.Open(name, unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
			if err != nil {
				continue
			}
			fh := os.NewFile(uintptr(fd), name)
			for range 1 + arg(&i)%2 {
				off, n := int64(arg(&i))<<18, (1+arg(&i))<<8
				_, _ = fh.WriteAt(bytes.Repeat([]byte{'x'}, n), off)
			}
			if size := int64(arg(&i)) << 20; size > 0 {
				_ = fh.Truncate(size) // a hole at the end, or data cut off
			}
			fh.Close()
			files = append(files, name)
		case 2:
			if len(files) > 0 {
				_ = os.Link(files[arg(&i)%len(files)], name)
			}
		case 3:
			targets := []string{"../../outside/secret", "/etc/passwd", "a", "t\x1b]0;x\x07", ".."}
			_ = os.Symlink(targets[arg(&i)%len(targets)], name)
		case 4:
			_ = unix.Mkfifo(name, 0o644)
		case 5: // a whiteout: a 0/0 character device
			_ = unix.Mknod(name, unix.S_IFCHR, 0)
		case 6:
			_ = unix.Lsetxattr(name, "user.overlay.opaque", []byte("y"), 0)
		case 7: // into a folder, or back up
			if fi, err := os.Lstat(name); err == nil && fi.IsDir() {
				cwd = name
			} else if cwd != upper {
				cwd = filepath.Dir(cwd)
			}
		case 8:
			_ = os.Rename(name, filepath.Join(cwd, fuzzNames[arg(&i)%len(fuzzNames)]))
		case 9:
			if fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0); err == nil {
				_ = unix.Bind(fd, &unix.SockaddrUnix{Name: name})
				unix.Close(fd)
			}
		case 10:
			if fi, err := os.Lstat(name); err == nil && fi.Mode()&os.ModeSymlink == 0 {
				_ = unix.Chmod(name, 0o7755)
			}
		case 11:
			_ = unix.Mknod(name, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
		case 12:
			_ = unix.Lsetxattr(name, "user.overlay.redirect", []byte("/elsewhere"), 0)
		}
	}
}

// tree describes everything under dir: names, types, modes, owners,
// contents and link targets, in order.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%q %v %d:%d", p, fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			line += fmt.Sprintf(" %q", b)
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			line += " -> " + l
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
