package doctor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/enforce/fsaudit"
)

// probeAudit asks the kernel for its audit status over NETLINK_AUDIT
// (netlink(7), AUDIT_GET needs CAP_AUDIT_CONTROL), for the detail, and asks
// fsaudit whether a run can read Landlock denial records. It changes no
// audit setting.
func probeAudit() Audit {
	var a Audit
	a.Enabled, a.DaemonPID, a.Err = auditStatus()
	a.Collector = fsaudit.Available()
	return a
}

// auditStatus sends AUDIT_GET and decodes the struct audit_status reply:
// mask, enabled, failure, pid, ... as native-endian u32s.
func auditStatus() (enabled, pid uint32, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return 0, 0, fmt.Errorf("netlink audit socket: %w: the kernel needs CONFIG_AUDIT", err)
	}
	defer unix.Close(fd)
	tv := unix.Timeval{Sec: 2}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, 0, err
	}
	req := make([]byte, unix.NLMSG_HDRLEN)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.AUDIT_GET)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(req[8:], 1) // sequence number
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, 0, fmt.Errorf("send AUDIT_GET: %w", err)
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, 0, fmt.Errorf("read AUDIT_GET reply: %w", err)
		}
		msgs, err := parseNetlink(buf[:n])
		if err != nil {
			return 0, 0, err
		}
		for _, m := range msgs {
			switch m.typ {
			case unix.NLMSG_ERROR:
				if len(m.data) < 4 {
					return 0, 0, errors.New("audit: short netlink error message")
				}
				if code := int32(binary.NativeEndian.Uint32(m.data)); code != 0 {
					return 0, 0, fmt.Errorf("AUDIT_GET: %w", syscall.Errno(-code))
				}
				// An ACK: the status came first or comes next.
			case unix.AUDIT_GET:
				if len(m.data) < 16 {
					return 0, 0, fmt.Errorf("audit: status reply of %d bytes, want at least 16", len(m.data))
				}
				return binary.NativeEndian.Uint32(m.data[4:]), binary.NativeEndian.Uint32(m.data[12:]), nil
			}
		}
	}
}

type netlinkMsg struct {
	typ  uint16
	data []byte
}

// parseNetlink splits a datagram into messages (netlink(7)).
func parseNetlink(b []byte) ([]netlinkMsg, error) {
	var out []netlinkMsg
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(b))
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			return nil, fmt.Errorf("audit: malformed netlink message of length %d in %d bytes", l, len(b))
		}
		out = append(out, netlinkMsg{typ: binary.NativeEndian.Uint16(b[4:]), data: b[unix.NLMSG_HDRLEN:l]})
		next := (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if next > len(b) {
			break
		}
		b = b[next:]
	}
	return out, nil
}
