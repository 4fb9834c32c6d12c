package connbroker

import (
	"encoding/binary"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// sockaddrBytes builds a sockaddr: the family in native order, then rest.
func sockaddrBytes(family uint16, rest ...byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, family)
	return append(b, rest...)
}

func inet6Bytes(port uint16, a netip.Addr, scope uint32, n int) []byte {
	b := sockaddrBytes(unix.AF_INET6, byte(port>>8), byte(port), 0, 0, 0, 0)
	a16 := a.As16()
	b = append(b, a16[:]...)
	b = binary.NativeEndian.AppendUint32(b, scope)
	return b[:n]
}

func TestParseSockaddr(t *testing.T) {
	inet4 := sockaddrBytes(unix.AF_INET, 0x01, 0xbb, 192, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0)
	tests := []struct {
		name  string
		raw   []byte
		want  Request // Raw is always raw
		errno unix.Errno
	}{
		{"inet4", inet4, Request{Family: unix.AF_INET, Addr: netip.MustParseAddrPort("192.0.2.1:443")}, 0},
		{"inet4-padded", append(append([]byte(nil), inet4...), make([]byte, 112)...), Request{Family: unix.AF_INET, Addr: netip.MustParseAddrPort("192.0.2.1:443")}, 0},
		{"inet4-short", inet4[:15], Request{}, unix.EINVAL},
		{"inet6", inet6Bytes(80, netip.MustParseAddr("2001:db8::1"), 0, 28), Request{Family: unix.AF_INET6, Addr: netip.MustParseAddrPort("[2001:db8::1]:80")}, 0},
		{"inet6-rfc2133", inet6Bytes(80, netip.MustParseAddr("2001:db8::1"), 7, 24), Request{Family: unix.AF_INET6, Addr: netip.MustParseAddrPort("[2001:db8::1]:80")}, 0},
		{"inet6-scope", inet6Bytes(80, netip.MustParseAddr("fe80::1"), 3, 28), Request{Family: unix.AF_INET6, Addr: netip.MustParseAddrPort("[fe80::1%3]:80")}, 0},
		{"inet6-mapped", inet6Bytes(22, netip.MustParseAddr("::ffff:127.0.0.1"), 3, 28), Request{Family: unix.AF_INET6, Addr: netip.MustParseAddrPort("127.0.0.1:22")}, 0},
		{"inet6-short", inet6Bytes(80, netip.MustParseAddr("2001:db8::1"), 0, 23), Request{}, unix.EINVAL},
		{"unix-path", sockaddrBytes(unix.AF_UNIX, []byte("/run/x.sock")...), Request{Family: unix.AF_UNIX, Path: "/run/x.sock"}, 0},
		{"unix-path-nul", sockaddrBytes(unix.AF_UNIX, []byte("/run/x\x00junk")...), Request{Family: unix.AF_UNIX, Path: "/run/x"}, 0},
		{"unix-abstract", sockaddrBytes(unix.AF_UNIX, []byte("\x00name\x00x")...), Request{Family: unix.AF_UNIX, Path: "@name\x00x"}, 0},
		{"unix-empty", sockaddrBytes(unix.AF_UNIX), Request{}, unix.EINVAL},
		{"unix-too-long", sockaddrBytes(unix.AF_UNIX, make([]byte, 109)...), Request{}, unix.EINVAL},
		{"unspec", sockaddrBytes(unix.AF_UNSPEC), Request{Family: unix.AF_UNSPEC}, 0},
		{"netlink", sockaddrBytes(unix.AF_NETLINK, make([]byte, 10)...), Request{Family: unix.AF_NETLINK}, 0},
		{"one-byte", []byte{2}, Request{}, unix.EINVAL},
		{"too-long", sockaddrBytes(unix.AF_INET, make([]byte, 127)...), Request{}, unix.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errno := parseSockaddr(tt.raw)
			if errno != tt.errno {
				t.Fatalf("parseSockaddr(%x) errno = %v, want %v", tt.raw, errno, tt.errno)
			}
			if errno != 0 {
				return
			}
			tt.want.Raw = got.Raw
			if string(got.Raw) != string(tt.raw) || got.Family != tt.want.Family || got.Addr != tt.want.Addr || got.Path != tt.want.Path {
				t.Errorf("parseSockaddr(%x) = %+v, want %+v", tt.raw, got, tt.want)
			}
		})
	}
}

func TestProcField(t *testing.T) {
	fdinfo := []byte("pos:\t0\nflags:\t02004002\nmnt_id:\t15\nino:\t1234\n")
	tests := []struct {
		name, key string
		in        []byte
		base      int
		want      int
		wantErr   bool
	}{
		{"fdinfo-flags", "flags:", fdinfo, 8, unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_RDWR, false},
		{"status-tgid", "Tgid:", []byte("Name:\tx\nUmask:\t0022\nState:\tS\nTgid:\t4242\nNgid:\t0\n"), 10, 4242, false},
		{"missing", "flags:", []byte("pos:\t0\n"), 8, 0, true},
		{"not-octal", "flags:", []byte("flags:\t09\n"), 8, 0, true},
		{"prefix-only-at-line-start", "flags:", []byte("eflags:\t1\n"), 8, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := procField(tt.in, tt.key, tt.base)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("procField(%q, %q) = %#o, %v, want %#o, error %v", tt.in, tt.key, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestParseNotif checks the struct seccomp_notif offsets against a buffer
// laid out as linux/seccomp.h says.
func TestParseNotif(t *testing.T) {
	e := binary.NativeEndian
	b := make([]byte, sizeofNotif)
	e.PutUint64(b, 0x1122334455667788)
	e.PutUint32(b[8:], 4321)
	e.PutUint32(b[16:], uint32(unix.SYS_CONNECT))
	e.PutUint32(b[20:], unix.AUDIT_ARCH_X86_64)
	for i := range 6 {
		e.PutUint64(b[32+8*i:], uint64(100+i))
	}
	n := parseNotif(b)
	want := notif{id: 0x1122334455667788, pid: 4321, nr: int32(unix.SYS_CONNECT), arch: unix.AUDIT_ARCH_X86_64, args: [6]uint64{100, 101, 102, 103, 104, 105}}
	if n != want {
		t.Errorf("parseNotif = %+v, want %+v", n, want)
	}
}

// TestPidfdOfThread opens a pidfd for a thread that is not the group
// leader, both ways openPidfd may (PIDFD_THREAD, and the thread group
// from /proc/<tid>/status on kernels before 6.9), and takes a copy of a
// known fd through it.
func TestPidfdOfThread(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "fd")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &want); err != nil {
		t.Fatal(err)
	}

	type result struct {
		tid, tgid int
		err       error
	}
	ch := make(chan result)
	hold := make(chan struct{})
	go func() {
		// A locked goroutine started here runs on a thread of its own,
		// which is not the main thread unless the runtime says so.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid := unix.Gettid()
		tgid, err := threadGroup(tid)
		ch <- result{tid, tgid, err}
		<-hold // keep the thread alive while the test opens it
	}()
	r := <-ch
	defer close(hold)
	if r.err != nil || r.tgid != os.Getpid() {
		t.Fatalf("threadGroup(%d) = %d, %v, want %d", r.tid, r.tgid, r.err, os.Getpid())
	}

	opens := map[string]func() (int, error){
		"openPidfd": func() (int, error) { return openPidfd(r.tid) },
		"tgid":      func() (int, error) { return unix.PidfdOpen(r.tgid, 0) },
	}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			pidfd, err := open()
			if err != nil {
				t.Fatalf("open pidfd for thread %d: %v", r.tid, err)
			}
			defer unix.Close(pidfd)
			cp, err := unix.PidfdGetfd(pidfd, int(f.Fd()), 0)
			if err != nil {
				t.Fatalf("pidfd_getfd: %v", err)
			}
			defer unix.Close(cp)
			var got unix.Stat_t
			if err := unix.Fstat(cp, &got); err != nil {
				t.Fatal(err)
			}
			if got.Dev != want.Dev || got.Ino != want.Ino {
				t.Errorf("pidfd_getfd copy is inode %d:%d, want %d:%d", got.Dev, got.Ino, want.Dev, want.Ino)
			}
		})
	}
}
