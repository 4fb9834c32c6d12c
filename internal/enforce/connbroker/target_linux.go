package connbroker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// This file reads what the broker needs from the target: its socket and
// the sockaddr in its memory. Nothing read here is trusted until the
// caller has checked, afterwards, that the notification is still valid
// (SECCOMP_IOCTL_NOTIF_ID_VALID): until then the pid may belong to another
// process that reused it. Every failure maps to the errno the connect is
// refused with.

// Sizes of the sockaddrs the kernel accepts (linux/in.h, linux/in6.h,
// linux/un.h, linux/socket.h).
const (
	minAddrLen      = 2   // sizeof(sa_family_t): anything shorter is EINVAL
	maxAddrLen      = 128 // sizeof(struct sockaddr_storage): anything longer is EINVAL
	sizeofInet4     = 16  // sizeof(struct sockaddr_in)
	sizeofInet6RFC  = 24  // SIN6_LEN_RFC2133: sockaddr_in6 without sin6_scope_id
	sizeofInet6     = 28  // sizeof(struct sockaddr_in6)
	sizeofUnix      = 110 // sizeof(struct sockaddr_un)
	offsetofSunPath = 2   // offsetof(struct sockaddr_un, sun_path)
)

// pidfdThread is PIDFD_THREAD (linux/pidfd.h, Linux 6.9), which is
// O_EXCL: pidfd_open of a thread that is not its group's leader.
const pidfdThread = unix.O_EXCL

// socketInfo is what the broker learns about the target's socket.
type socketInfo struct {
	domain, typ, protocol int
	netns                 uint64 // SO_NETNS_COOKIE, 0 when unknown
	copy                  int    // the broker's copy of the socket (pidfd_getfd); the caller closes it
}

// soNetnsCookie is SO_NETNS_COOKIE (asm-generic/socket.h, Linux 5.14).
const soNetnsCookie = 71

// NetNSCookie returns the cookie of the network namespace the socket fd
// belongs to (SO_NETNS_COOKIE, Linux 5.14), the value Request.NetNS is
// compared with.
func NetNSCookie(fd int) (uint64, error) {
	return unix.GetsockoptUint64(fd, unix.SOL_SOCKET, soNetnsCookie)
}

// inspectSocket looks at fd in the thread tid: it takes a copy of the fd
// with pidfd_getfd(2) (Linux 5.6) to read the socket's domain, type,
// protocol and network namespace. A target fd that is not open gets EBADF
// and one that is not a socket ENOTSOCK, as from the kernel's connect;
// anything else that goes wrong refuses with EACCES. It reads nothing
// else: the fd's flags, which only an installed connection needs, are
// read by fdinfoFlags when one is.
//
// Taking the copy moves nothing and changes nothing the target sees,
// except that on cgroup v1 the socket's net_cls and net_prio tags become
// the supervisor's (pidfd_getfd(2)). On success the caller owns
// socketInfo.copy and closes it.
func inspectSocket(tid, fd int) (si socketInfo, errno unix.Errno) {
	if fd < 0 {
		return socketInfo{}, unix.EBADF
	}
	pidfd, err := openPidfd(tid)
	if err != nil {
		return socketInfo{}, unix.EACCES
	}
	defer unix.Close(pidfd)
	cp, err := unix.PidfdGetfd(pidfd, fd, 0) // always close-on-exec
	switch {
	case errors.Is(err, unix.EBADF):
		return socketInfo{}, unix.EBADF
	case err != nil:
		return socketInfo{}, unix.EACCES
	}
	defer func() {
		if errno != 0 {
			unix.Close(cp)
		}
	}()

	si.copy = cp
	for _, o := range []struct {
		opt int
		dst *int
	}{{unix.SO_DOMAIN, &si.domain}, {unix.SO_TYPE, &si.typ}, {unix.SO_PROTOCOL, &si.protocol}} {
		v, err := unix.GetsockoptInt(cp, unix.SOL_SOCKET, o.opt)
		switch {
		case errors.Is(err, unix.ENOTSOCK):
			return socketInfo{}, unix.ENOTSOCK
		case err != nil:
			return socketInfo{}, unix.EACCES
		}
		*o.dst = v
	}
	if c, err := NetNSCookie(cp); err == nil {
		si.netns = c
	}
	return si, 0
}

// openPidfd returns a pidfd for the thread tid: with PIDFD_THREAD where
// the kernel has it (Linux 6.9), else for its thread group, whose leader
// shares the thread's fd table in every program that does not unshare it.
func openPidfd(tid int) (int, error) {
	fd, err := unix.PidfdOpen(tid, pidfdThread)
	if !errors.Is(err, unix.EINVAL) {
		return fd, err
	}
	tgid, err := threadGroup(tid)
	if err != nil {
		return -1, err
	}
	return unix.PidfdOpen(tgid, 0)
}

// threadGroup reads the Tgid line of /proc/<tid>/status.
func threadGroup(tid int) (int, error) {
	b, err := readProc("/proc/"+strconv.Itoa(tid)+"/status", 4096)
	if err != nil {
		return 0, err
	}
	return procField(b, "Tgid:", 10)
}

// fdinfoFlags reads the flags line of /proc/<tid>/fdinfo/<fd> (proc(5)),
// which is octal and includes O_CLOEXEC when the fd is close-on-exec
// (a flag of the fd, which a copy of it cannot tell).
func fdinfoFlags(tid, fd int) (int, error) {
	b, err := readProc("/proc/"+strconv.Itoa(tid)+"/fdinfo/"+strconv.Itoa(fd), 4096)
	if err != nil {
		return 0, err
	}
	return procField(b, "flags:", 8)
}

// readProc reads at most limit bytes of a /proc file; the fields the
// broker wants are near the start. It makes the syscalls itself: an
// os.File would add five (fcntl and epoll_ctl to try the netpoller) to
// the four needed.
func readProc(path string, limit int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, limit)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case m == 0:
			return buf[:n], nil
		}
		n += m
	}
	return buf[:n], nil
}

// procField parses the number after the line that starts with key.
func procField(b []byte, key string, base int) (int, error) {
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte(key)); ok {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), base, 64)
			if err != nil || n < 0 || n > 1<<31-1 {
				return 0, errors.New("connbroker: airlock bug: /proc field " + key + " is not a number: " + strconv.Quote(string(line)))
			}
			return int(n), nil
		}
	}
	return 0, errors.New("connbroker: airlock bug: /proc file has no field " + key)
}

// readSockaddr reads n bytes at addr in the memory of the thread tid with
// process_vm_readv(2) (Linux 3.2), which needs the same permission as
// ptrace attach. An address the target cannot read either gets EFAULT, as
// from the kernel's connect; any other failure refuses with EACCES.
func readSockaddr(tid int, addr uint64, n int) ([]byte, unix.Errno) {
	buf := make([]byte, n)
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(n)
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: n}}
	got, err := unix.ProcessVMReadv(tid, local, remote, 0)
	switch {
	case errors.Is(err, unix.EFAULT), err == nil && got < n:
		return nil, unix.EFAULT
	case err != nil:
		return nil, unix.EACCES
	}
	return buf, 0
}

// parseSockaddr decodes raw, a sockaddr of 2 to 128 bytes, into a Request.
// It refuses with EINVAL what the kernel's connect would refuse for its
// length: an AF_INET or AF_INET6 address shorter than its struct, an
// AF_UNIX one with no path or longer than sockaddr_un.
func parseSockaddr(raw []byte) (Request, unix.Errno) {
	if len(raw) < minAddrLen || len(raw) > maxAddrLen {
		return Request{}, unix.EINVAL
	}
	r := Request{Family: int(binary.NativeEndian.Uint16(raw)), Raw: raw}
	switch r.Family {
	case unix.AF_INET:
		if len(raw) < sizeofInet4 {
			return Request{}, unix.EINVAL
		}
		port := binary.BigEndian.Uint16(raw[2:])
		r.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[4:8])), port)
	case unix.AF_INET6:
		if len(raw) < sizeofInet6RFC {
			return Request{}, unix.EINVAL
		}
		port := binary.BigEndian.Uint16(raw[2:])
		a := netip.AddrFrom16([16]byte(raw[8:24]))
		var scope uint32
		if len(raw) >= sizeofInet6 {
			scope = binary.NativeEndian.Uint32(raw[24:])
		}
		switch {
		case a.Is4In6():
			a = a.Unmap()
		case scope != 0:
			a = a.WithZone(strconv.FormatUint(uint64(scope), 10))
		}
		r.Addr = netip.AddrPortFrom(a, port)
	case unix.AF_UNIX:
		if len(raw) <= offsetofSunPath || len(raw) > sizeofUnix {
			return Request{}, unix.EINVAL
		}
		path := raw[offsetofSunPath:]
		if path[0] == 0 {
			// Abstract: the name is every byte after the NUL, NULs included.
			r.Path = "@" + string(path[1:])
		} else {
			// Pathname: the kernel stops at the first NUL.
			if i := bytes.IndexByte(path, 0); i >= 0 {
				path = path[:i]
			}
			r.Path = string(path)
		}
	}
	return r, 0
}
