package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// gVisor (runsc) as an OCI runtime of isolation oci: the same bundle, with
// what a user-space kernel needs changed.
//
//   - Writes are made in place (the gofer has no overlay of a host folder
//     to stage them on): fs_write folders need allow_downgrade:
//     staged_writes, as without namespaces.
//   - The cgroup also holds the sentry's and the gofer's own threads and
//     memory: the bundle's pids and memory limits get sentryPids and
//     sentryMemory on top of the budget.
//   - The network is the sentry's own (--network=none: loopback only). The
//     container's pid 1 listens on the proxy's ports there and relays each
//     connection to a unix socket of the supervisor's, bound into the
//     container (--host-uds=open), where the egress proxy decides it.
//   - runsc of this vintage does not know the recursive mount attributes
//     (rro, rnosuid, ...): a gVisor mount is one mount, so the plain ones
//     mean the same.

// What the sentry and the gofer need beyond the workload's budget (an
// idle sandbox on the ptrace platform holds 113 tasks and 21 MiB here).
const (
	sentryPids   = 192
	sentryMemory = 128 << 20
)

// sentryEgress is where the bundle binds the supervisor's proxy sockets.
const sentryEgress = "/.airlock/egress"

// sentryWeaker is what a gVisor run gives up against airlock's own init.
var sentryWeaker = []string{
	"gvisor: fs_write grants are written in place (no staging, so max_write and the write-back refusals do not apply; existing protected paths stay read-only)",
	"gvisor: max_pids and max_memory count the sentry's and gofer's own threads and memory too (the cgroup gets 192 tasks and 128 MiB more)",
	"gvisor: a session exec's timeout kills its main process, not what it started (runsc kill --pid); everything dies when the session ends",
	"gvisor: filesystem denials are not reported",
	"gvisor: /dev and /dev/shm are the sentry's own writable tmpfs (it ignores the bundle's read-only /dev): what is written there counts against max_memory, not max_scratch",
	"gvisor: the workload's syscalls are served by gVisor's own kernel (the sentry), which gVisor's host seccomp filter confines; airlock's seccomp profile is not applied inside it (this runsc would answer its ENOSYS rules with EPERM, which breaks programs that expect ENOSYS), so calls the other backends refuse, such as ptrace and memfd_create, are the sentry's to serve",
}

// sentryWrites refuses fs_write folders unless the policy accepts writes
// in place (the plan's write grants are plain binds: plan.BackendGVisor).
func sentryWrites(b *box) error {
	return writeInPlace(b, "under gVisor fs_write folders are written in place (its gofer cannot stage them): max_write is not enforced and new protected paths (git hooks, rc files) can be created; add staged_writes to allow_downgrade to accept that, or grant single files")
}

// writeInPlace checks the plan of a backend that cannot stage writes
// (gVisor, the microVM), whose write grants are plain binds: it refuses
// fs_write folders with refusal unless the policy accepts staged_writes.
func writeInPlace(b *box, refusal string) error {
	folders := plan.WritesFoldersInPlace(b.pl)
	if folders && !b.cfg.Policy.AcceptsDowngrade(policy.DowngradeStagedWrites) {
		return errors.New(refusal)
	}
	if folders {
		b.downgradedAs(policy.DowngradeStagedWrites, weakerInPlace)
	}
	return nil
}

// sentryBundle changes the bundle for runsc.
func (l *ociLaunch) sentryBundle(ob *oci.Bundle) error {
	for i := range ob.Spec.Mounts {
		opts := ob.Spec.Mounts[i].Options[:0:0]
		for _, o := range ob.Spec.Mounts[i].Options {
			switch o {
			case "rro", "rrw", "rnosuid", "rnodev", "rnoexec", "rexec", "rsuid", "rdev":
				o = o[1:]
			}
			opts = append(opts, o)
		}
		ob.Spec.Mounts[i].Options = opts
	}
	if r := ob.Spec.Linux.Resources; r != nil {
		if r.Pids != nil && r.Pids.Limit != nil && *r.Pids.Limit > 0 {
			n := *r.Pids.Limit + sentryPids
			r.Pids.Limit = &n
		}
		if r.Memory != nil && r.Memory.Limit != nil && *r.Memory.Limit > 0 {
			m := *r.Memory.Limit + sentryMemory
			r.Memory.Limit = &m
			if r.Memory.Swap != nil {
				r.Memory.Swap = &m
			}
		}
	}
	if !l.b.pl.Proxy {
		return nil
	}
	dir := filepath.Join(l.tmp, "egress")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	ob.Spec.Mounts = append(ob.Spec.Mounts, specs.Mount{Destination: sentryEgress, Type: "bind", Source: dir, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	ob.Spec.Process.Args = []string{nsinit.PausePath, "forward", sentryEgress + "/http.sock", sentryEgress + "/socks.sock"}
	return nil
}

// serveSentryProxy serves the egress proxy on the two unix sockets the
// container's pid 1 relays to.
func (l *ociLaunch) serveSentryProxy() error {
	if !l.b.pl.Proxy {
		return nil
	}
	var fds []int
	for _, name := range []string{"http.sock", "socks.sock"} {
		fd, err := unixListener(filepath.Join(l.tmp, "egress", name))
		if err != nil {
			closeFDs(fds)
			return fmt.Errorf("egress proxy socket for gVisor: %w", err)
		}
		fds = append(fds, fd)
	}
	l.b.serveProxy(fds)
	return nil
}

// unixListener makes a listening unix socket at path that the
// container's mapped uid may connect to.
func unixListener(path string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err = unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err == nil {
		if err = os.Chmod(path, 0o777); err == nil {
			err = unix.Listen(fd, 128)
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("listen on %s: %w", path, err)
	}
	return fd, nil
}

// checkWritable refuses an fs_write grant the container's host uid cannot
// write: under gVisor the gofer writes in place as that uid, picked at
// random per run, so a folder must be writable and searchable by others
// and a file writable by others. What it creates is given back to the
// grant's owner when the run ends (chownBack).
func checkWritable(grants []string) error {
	for _, g := range grants {
		var st unix.Stat_t
		if err := unix.Stat(g, &st); err != nil {
			return fmt.Errorf("fs_write %q: %w", g, err)
		}
		need := uint32(0o2)
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			need = 0o3
		}
		if st.Mode&need != need {
			return fmt.Errorf("fs_write %q (owner %d, mode %o) is not writable by the container's host uid, picked at random per run: under gVisor writes are made in place by that uid, so make it writable by others (chmod o+wx on a folder, o+w on a file; what the run creates is given to you at the end), or use another isolation", g, st.Uid, st.Mode&0o7777)
		}
	}
	return nil
}

// chownBack gives what the container's host uid id created or changed in
// the fs_write grants to the caller, as the other backends leave it. It
// runs once the container is dead; it never follows a symlink and never
// leaves a grant.
func chownBack(grants []string, id int) {
	const most = 1 << 17
	n := 0
	uid, gid := os.Getuid(), os.Getgid()
	for _, g := range grants {
		_ = filepath.WalkDir(g, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if n++; n > most {
				return filepath.SkipAll
			}
			var st unix.Stat_t
			if unix.Lstat(p, &st) == nil && int(st.Uid) == id {
				_ = unix.Lchown(p, uid, gid)
			}
			return nil
		})
	}
}
