package namespace

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// HostAdmin reports whether this process holds CAP_SYS_ADMIN in the
// initial user namespace: root on the host, not root in a container. Only
// then can the supervisor create idmapped mounts and map the sandbox to an
// unprivileged host id; everywhere else (a non-root user, root in a
// container, which keeps uid 0 but not that capability) it takes the
// unprivileged path and maps root inside to its own uid.
//
// The initial user namespace is the one whose uid_map is the identity over
// every id ("0 0 4294967295"); a container's is not. A child namespace
// made with that same full map passes the test, and the privileged path
// then fails at its first idmapped mount with EPERM: it never runs with
// less than it reports.
func HostAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	if data[unix.CAP_SYS_ADMIN/32].Effective&(1<<(unix.CAP_SYS_ADMIN%32)) == 0 {
		return false
	}
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return strings.Join(strings.Fields(string(b)), " ") == "0 0 4294967295"
}
