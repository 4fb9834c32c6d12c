package connbroker

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// childCalls hands fchmodat calls to the broker (callsEnv) with paths a
// Call must read as the kernel would, and prints each call's errno: the
// test's Handler.Syscall answers with an errno that says what it read.
func childCalls() error {
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	// The second page is gone (raw munmap: x/sys's unmaps whole mappings).
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&mem[page])), uintptr(page), 0); e != 0 {
		return e
	}
	edge := page - len("edge\x00") // "edge" ends the last mapped page
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'a'
	}
	long[len(long)-1] = 0
	unterminated := page - 3 // then "abc" does, unterminated
	rel := []byte("rel/path\x00")
	devnull, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		key   string
		dirfd int
		at    []byte // the path's memory; nil: a NULL pointer
		put   string // written there first
	}{
		{"rel", unix.AT_FDCWD, rel, ""},
		{"edge", unix.AT_FDCWD, mem[edge:page], "edge\x00"},
		{"long", unix.AT_FDCWD, long, ""},
		{"unterminated", unix.AT_FDCWD, mem[unterminated:page], "abc"},
		{"null", unix.AT_FDCWD, nil, ""},
		{"dirfd", devnull, rel, ""},
		{"badfd", 9999, rel, ""},
	} {
		copy(c.at, c.put)
		var p uintptr
		if c.at != nil {
			p = uintptr(unsafe.Pointer(&c.at[0]))
		}
		_, _, errno := unix.Syscall6(unix.SYS_FCHMODAT, uintptr(c.dirfd), p, 0o644, 0, 0, 0)
		fmt.Printf("%s %d\n", c.key, errno)
	}
	return nil
}

// callAnswer is the errno the test's Syscall answers a Call with: which
// one tells the child what the Call read.
func callAnswer(c *Call) unix.Errno {
	if c.Nr != unix.SYS_FCHMODAT {
		return unix.EINVAL
	}
	p, errno := c.ReadString(c.Args[1], unix.PathMax-1)
	switch {
	case errno != 0:
		return errno
	case p == "edge":
		return unix.ENOTDIR
	case p != "rel/path":
		return unix.EILSEQ
	}
	dirfd := int(int32(c.Args[0]))
	var fd int
	if dirfd == unix.AT_FDCWD {
		fd, errno = c.Cwd()
	} else {
		fd, errno = c.FD(dirfd)
	}
	if errno != 0 {
		return errno
	}
	defer unix.Close(fd)
	if !c.Valid() {
		return unix.EINTR
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return unix.EIO
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFCHR:
		return unix.ENOTTY // the target's /dev/null
	case st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Ino == rootIno():
		return unix.EXDEV // the target's working folder, /
	}
	return unix.EIO
}

func rootIno() uint64 {
	var st unix.Stat_t
	unix.Stat("/", &st)
	return st.Ino
}

// TestSyscallHandler: Handler.Syscall gets the calls that are not connect
// and answers them with its errno; a Call reads a string as the kernel
// would (up to an unmapped page, ENAMETOOLONG beyond PATH_MAX, EFAULT for
// memory that ends first), the target's working folder and fds.
func TestSyscallHandler(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	var mu sync.Mutex
	var nrs []string
	tg := startTarget(t, "calls", callsEnv+"=1")
	s := serveHandler(tg.listener, Handler{Decide: refuseAll(unix.EACCES), Syscall: func(c *Call) bool {
		mu.Lock()
		nrs = append(nrs, strconv.Itoa(c.Nr))
		mu.Unlock()
		go c.Answer(callAnswer(c)) // answered on another goroutine, as the metadata broker does
		return true
	}})
	got := tg.wait(t)
	s.wait(t, false)
	wantLines(t, got, map[string]string{
		"rel": errnoStr(unix.EXDEV), "edge": errnoStr(unix.ENOTDIR), "long": errnoStr(unix.ENAMETOOLONG),
		"unterminated": errnoStr(unix.EFAULT), "null": errnoStr(unix.EFAULT), "dirfd": errnoStr(unix.ENOTTY), "badfd": errnoStr(unix.EBADF),
	})
	if len(nrs) != 7 {
		t.Errorf("Syscall saw %d calls (%s), want 7", len(nrs), strings.Join(nrs, " "))
	}
}

// TestSyscallWithoutHandler: without Handler.Syscall, a call other than
// connect is refused with EPERM, never let through.
func TestSyscallWithoutHandler(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	tg := startTarget(t, "calls", callsEnv+"=1")
	s := serve(tg.listener, refuseAll(unix.EACCES))
	got := tg.wait(t)
	s.wait(t, false)
	for _, k := range []string{"rel", "edge", "long", "dirfd"} {
		if got[k] != errnoStr(unix.EPERM) {
			t.Errorf("child %s = %q, want EPERM", k, got[k])
		}
	}
}

// TestSyscallLeft: a call Syscall leaves fails with EAGAIN.
func TestSyscallLeft(t *testing.T) {
	requireBroker(t)
	t.Parallel()
	tg := startTarget(t, "calls", callsEnv+"=1")
	s := serveHandler(tg.listener, Handler{Decide: refuseAll(unix.EACCES), Syscall: func(*Call) bool { return false }})
	got := tg.wait(t)
	s.wait(t, false)
	if got["rel"] != errnoStr(unix.EAGAIN) || got["dirfd"] != errnoStr(unix.EAGAIN) {
		t.Errorf("child rel = %q, dirfd = %q, want EAGAIN", got["rel"], got["dirfd"])
	}
}
