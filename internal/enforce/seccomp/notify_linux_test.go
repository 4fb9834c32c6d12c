package seccomp

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/plan"
)

// notifyProfile is the default profile with connect sent to a listener.
func notifyProfile() plan.Seccomp {
	p := plan.DefaultSeccomp()
	for i := range p.Syscalls {
		if p.Syscalls[i].Name == "connect" {
			p.Syscalls[i].Rules = []plan.SyscallRule{{Action: plan.ActNotify}}
		}
	}
	return p
}

// requireUserNotif skips unless the kernel has seccomp user notification
// (SECCOMP_RET_USER_NOTIF, Linux 5.0).
func requireUserNotif(t *testing.T) {
	t.Helper()
	requireSeccomp(t)
	if err := actionAvail(unix.SECCOMP_RET_USER_NOTIF); err != nil {
		airtest.SkipOrFail(t, "kernel has no seccomp user notification (SECCOMP_GET_ACTION_AVAIL USER_NOTIF: %v); it needs Linux 5.0", err)
	}
}

// actionAvail asks the kernel whether it knows the filter return action
// (seccomp(SECCOMP_GET_ACTION_AVAIL), Linux 4.14).
func actionAvail(action uint32) error {
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
	if errno != 0 {
		return errno
	}
	return nil
}

// threadState is what /proc/thread-self/status says about the calling
// thread's seccomp state.
type threadState struct {
	mode    string // Seccomp: 0 none, 2 filter
	filters string // Seccomp_filters: how many filters (Linux 5.9)
	nnp     string // NoNewPrivs
}

func readThreadState() (threadState, error) {
	f, err := os.Open("/proc/thread-self/status")
	if err != nil {
		return threadState{}, err
	}
	defer f.Close()
	var st threadState
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "Seccomp":
			st.mode = v
		case "Seccomp_filters":
			st.filters = v
		case "NoNewPrivs":
			st.nnp = v
		}
	}
	return st, sc.Err()
}

// TestInstallListener installs the filter in a child and checks that only
// the calling thread gets it and no_new_privs, that the listener is
// close-on-exec, and that a second listener is refused. The child starts
// from whatever filter the test runs under (a container's, say), so the
// checks compare with the state before.
func TestInstallListener(t *testing.T) {
	requireUserNotif(t)
	out := airtest.RunInChild(t, func() error {
		prog, err := Build(notifyProfile(), Options{})
		if err != nil {
			return err
		}
		before, err := readThreadState()
		if err != nil {
			return err
		}
		fd, err := InstallListener(prog)
		if err != nil {
			return err
		}
		fdFlags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			return fmt.Errorf("fcntl(listener, F_GETFD): %w", err)
		}
		if fdFlags&unix.FD_CLOEXEC == 0 {
			return fmt.Errorf("listener fd %d is not close-on-exec", fd)
		}
		self, err := readThreadState()
		if err != nil {
			return err
		}
		n0, err0 := strconv.Atoi(before.filters)
		n1, err1 := strconv.Atoi(self.filters)
		if self.mode != "2" || self.nnp != "1" || err0 != nil || err1 != nil || n1 != n0+1 {
			return fmt.Errorf("calling thread after InstallListener: %+v (before %+v), want mode 2, one more filter, nnp 1", self, before)
		}
		// A fresh goroutine cannot run on this locked thread: it reports
		// another thread of the process, which must be as it was.
		other := make(chan threadState)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			st, err := readThreadState()
			if err != nil {
				st.mode = err.Error()
			}
			other <- st
		}()
		if st := <-other; st != before {
			return fmt.Errorf("another thread after InstallListener: %+v, want %+v as before: without TSYNC only the caller gets the filter", st, before)
		}
		if _, err := InstallListener(prog); !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("second InstallListener: %v, want EBUSY: one listener per filter chain", err)
		}
		fmt.Println(probedMarker)
		return nil
	})
	if out != probedMarker+"\n" {
		t.Fatalf("child output %q, want %q", out, probedMarker+"\n")
	}
}

// TestInstallListenerInvalid checks that a program the kernel would refuse
// is rejected before anything is installed (so the test process may call
// it).
func TestInstallListenerInvalid(t *testing.T) {
	fd, err := InstallListener(nil)
	if err == nil || fd != -1 {
		t.Fatalf("InstallListener(nil) = %d, %v, want -1 and an error", fd, err)
	}
}
