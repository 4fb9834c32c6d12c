package fsaudit

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// status is the head of struct audit_status (include/uapi/linux/audit.h),
// the payload of AUDIT_GET replies and AUDIT_SET requests. The kernel
// accepts a shorter AUDIT_SET payload and zero-fills the rest.
type status struct {
	Mask         uint32 // AUDIT_STATUS_* bits that an AUDIT_SET changes
	Enabled      uint32 // 0 off, 1 on, 2 on and locked until reboot
	Failure      uint32
	Pid          uint32 // the registered audit daemon, 0 for none
	RateLimit    uint32 // records per second, 0 for unlimited
	BacklogLimit uint32 // records queued before they are dropped
	Lost         uint32
	Backlog      uint32
}

const statusSize = 8 * 4

// openAudit opens a NETLINK_AUDIT socket (netlink(7), audit since Linux
// 2.6.6) and binds it to the given multicast groups.
func openAudit(groups uint32) (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_AUDIT)
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) {
			return -1, fmt.Errorf("fsaudit: open audit netlink socket: %w: the kernel has no audit (built without CONFIG_AUDIT or booted with audit=0) (%w)", err, ErrUnavailable)
		}
		return -1, fmt.Errorf("fsaudit: open audit netlink socket: %w (%w)", err, ErrUnavailable)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groups}); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EPERM) {
			return -1, fmt.Errorf("fsaudit: join the audit read-only log group: %w: needs CAP_AUDIT_READ in the initial user namespace; run airlock as root to report filesystem denials (%w)", err, ErrUnavailable)
		}
		return -1, fmt.Errorf("fsaudit: join the audit read-only log group: %w (%w)", err, ErrUnavailable)
	}
	return fd, nil
}

// auditRequest sends one audit control message (AUDIT_GET or AUDIT_SET)
// on a fresh socket and returns the AUDIT_GET status, if one came. The
// kernel answers only callers in the initial user and pid namespaces with
// CAP_AUDIT_CONTROL (kernel/audit.c, audit_netlink_ok).
func auditRequest(typ uint16, payload []byte) (status, error) {
	fd, err := openAudit(0)
	if err != nil {
		return status{}, err
	}
	defer unix.Close(fd)
	// SOCK_NONBLOCK was for the reader; replies are awaited here, bounded
	// by SO_RCVTIMEO so that a kernel that never answers cannot hang us.
	if err := unix.SetNonblock(fd, false); err != nil {
		return status{}, err
	}
	tv := unix.Timeval{Sec: 2}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return status{}, err
	}
	msg := make([]byte, unix.NLMSG_HDRLEN+len(payload))
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], 1) // sequence number
	copy(msg[unix.NLMSG_HDRLEN:], payload)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return status{}, err
	}
	var st status
	gotStatus, gotAck := typ != unix.AUDIT_GET, false
	buf := make([]byte, 8192)
	for !gotStatus || !gotAck {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return status{}, err
		}
		for b := buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			l := int(binary.NativeEndian.Uint32(b[0:]))
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				break
			}
			data := b[unix.NLMSG_HDRLEN:l]
			switch binary.NativeEndian.Uint16(b[4:]) {
			case unix.NLMSG_ERROR:
				if len(data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(data)); e != 0 {
						return status{}, unix.Errno(-e)
					}
				}
				gotAck = true
			case unix.AUDIT_GET:
				if len(data) < statusSize {
					return status{}, fmt.Errorf("airlock bug: AUDIT_GET reply of %d bytes", len(data))
				}
				_, err := binary.Decode(data[:statusSize], binary.NativeEndian, &st)
				if err != nil {
					return status{}, err
				}
				gotStatus = true
			}
			b = b[min(len(b), (l+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1)):]
		}
	}
	return st, nil
}

// getStatus returns the kernel's audit status (AUDIT_GET).
func getStatus() (status, error) {
	st, err := auditRequest(unix.AUDIT_GET, nil)
	if err != nil {
		return status{}, fmt.Errorf("fsaudit: read the kernel's audit status: %w: needs CAP_AUDIT_CONTROL in the initial user and pid namespaces; run airlock as root on the host (%w)", err, ErrUnavailable)
	}
	return st, nil
}

// setEnabled turns the kernel's audit on or off (AUDIT_SET with
// AUDIT_STATUS_ENABLED).
func setEnabled(on bool) error {
	st := status{Mask: unix.AUDIT_STATUS_ENABLED}
	if on {
		st.Enabled = 1
	}
	payload, err := binary.Append(nil, binary.NativeEndian, st)
	if err != nil {
		return err
	}
	if _, err := auditRequest(unix.AUDIT_SET, payload); err != nil {
		return fmt.Errorf("set kernel audit enabled=%d: %w", st.Enabled, err)
	}
	return nil
}

// otherReaders counts the sockets of this network namespace, other than
// the kernel's, that are bound to an audit multicast group: other
// collectors, in this process or not, and tools like journald that read
// the audit log the same way. /proc/net/netlink (proc(5)) lists one
// socket per line: sk Eth Pid Groups ...
func otherReaders() (int, error) {
	f, err := os.Open("/proc/net/netlink")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		col := strings.Fields(sc.Text())
		if len(col) < 4 || col[1] != strconv.Itoa(unix.NETLINK_AUDIT) {
			continue
		}
		if g, err := strconv.ParseUint(col[3], 16, 32); err == nil && g != 0 {
			n++
		}
	}
	return n, sc.Err()
}

// threadGroup returns the process id of thread tid from /proc/<tid>/status
// (proc(5)), or tid when the thread is gone.
func threadGroup(tid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return tid
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && pid > 0 {
				return pid
			}
		}
	}
	return tid
}

// landlockABI returns the kernel's Landlock ABI version from
// landlock_create_ruleset(2) with LANDLOCK_CREATE_RULESET_VERSION (Linux
// 5.13), or 0 when Landlock is absent.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}
