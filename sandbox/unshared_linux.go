package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/enforce/connbroker"
	"github.com/airlock-sandbox/airlock/internal/enforce/metabroker"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// BackendLandlock is the report's name of the backend without namespaces.
const BackendLandlock = "landlock"

// unsharedBackend runs the sandbox without namespaces, where user
// namespaces cannot be created (a container's seccomp profile,
// user.max_user_namespaces=0): the init runs in the host's namespaces as
// the caller, and the commands as the caller too, or, when that is root,
// as the fs_write grants' owner or an unprivileged id (runas_linux.go);
// Landlock confines the host's filesystem, TCP and signals, seccomp
// refuses what a network namespace would have contained, and the
// supervisor answers every connect(2) (internal/enforce/connbroker): it
// connects the egress proxy itself and hands that socket back, so the
// address it checked is the one used. It also answers every change of a
// file's mode, owner, times or extended attributes, for which Landlock
// has no right (internal/enforce/metabroker): it makes the change itself,
// as the sandbox's uid, beneath the fs_write grants only. The report's
// enforcement.weaker lists what this gives up against the namespace
// backend.
type unsharedBackend struct {
	// why says why the namespace backend could not run, for the report;
	// "" when the caller chose this backend.
	why string
}

// weakerUnshared is what every run of this backend gives up.
var weakerUnshared = []string{
	"files: no mount namespace: the host's files outside the grants exist and are denied by Landlock rather than absent (their names, sizes, times and extended attributes can be read where the sandbox's uid may: Landlock guards contents, not metadata), and the system base is the host's own (/usr/lib, /etc/passwd, /etc/hosts)",
	"processes: no pid namespace: the host's processes are listed in /proc (what ps shows of them) but cannot be signalled, traced or read (Landlock's scopes); the sandbox's init is a subreaper that kills the whole tree when the run ends",
	"network: no network namespace: every connect(2) is answered by the supervisor, which connects nothing but the egress proxy; there are no local servers (listen is refused), no UDP and no connects to unix sockets; /proc/net lists the host's sockets",
	"tools: no noexec mounts: only the command, allowed_tools and the loader can be executed, but the loader can still map a program the sandbox wrote or can read (ld.so FILE), since Landlock restricts execve and not mmap",
	"/tmp: no private /tmp: TMPDIR and HOME are a scratch folder on the host's disk, removed at the end; max_scratch is a check every 250 ms, not a tmpfs's cap, so the disk can hold what the sandbox writes in that time beyond it before the run is stopped (each file is bounded by RLIMIT_FSIZE, the larger of max_scratch and 1 GiB; fallocate is refused with EOPNOTSUPP so space is never reserved faster than written, and a folder that cannot be measured halts the run)",
	"hostname and IPC: the host's hostname; System V IPC and POSIX message queues are refused rather than private",
	"metadata: Landlock has no right for a file's mode, owner, times or extended attributes: the supervisor's metadata broker makes those changes for the sandbox, as its uid, on the host's files in place beneath the fs_write grants and the scratch folder only, and refuses a set-user-ID or set-group-ID bit on a file, another owner, an extended attribute but user.* and POSIX ACLs, and the protected paths; inode flags (chattr) cannot be set, and no file is created set-user-ID or set-group-ID",
}

// The report's lines on the sandbox's uid, as a user and as root.
const (
	weakerUIDUser = "uid: no user namespace: the sandbox runs as airlock's own uid %d, which owns the caller's files outside the grants too: Landlock keeps the sandbox from reading and writing their contents, and the metadata broker from changing their mode, owner, times or extended attributes"
	weakerUIDRoot = "uid: no user namespace: the sandbox runs as uid %d gid %d (%s), never as root's, with no supplementary groups and every capability dropped; the files it writes belong to that uid"
)

// weakerUID is the report's line on the sandbox's uid.
func weakerUID(id identity) string {
	if os.Geteuid() != 0 {
		return fmt.Sprintf(weakerUIDUser, id.UID)
	}
	return fmt.Sprintf(weakerUIDRoot, id.UID, id.GID, id.why)
}

// weakerBrokers is the report's line when the connect and metadata brokers
// cannot read the sandbox's calls (err, connbroker.Probe's).
func weakerBrokers(err error) string {
	return "network and metadata: the supervisor's brokers cannot read every call of the sandbox here (" + err.Error() + "): every connect(2) is refused, and so is every change of a file's mode, owner, times or extended attributes that the metadata broker cannot read (EACCES), and these refusals are not listed among the denials"
}

// unsharedRefusal refuses, before anything is compiled or started, what
// p asks for that needs a mount namespace, which the landlock backend
// lacks.
func unsharedRefusal(p *policy.Policy) error {
	if p.Placed() {
		return errors.New("a grant placed inside (HOST:INSIDE) needs a mount namespace to appear at its place, and the landlock backend has none (nothing was started): run where user namespaces can be created, or grant the host path as it is")
	}
	if root := p.Rootfs(); root != "" {
		return fmt.Errorf("the environment %s (rootfs) needs a mount namespace to stand in for the host's system folders, and the landlock backend has none (nothing was started): run where user namespaces can be created, or drop the rootfs", root)
	}
	if len(p.Credentials()) > 0 {
		return errors.New("credentials need a mount namespace, to give the sandbox the trust bundle of airlock's per-run CA: the landlock backend has none; run with the namespaces, oci or gvisor isolation")
	}
	return nil
}

// launch makes the scratch folder of b.pl (compiled for the landlock
// backend by compileLandlock), the cgroup where one is delegated, and
// starts the init.
func (ub unsharedBackend) launch(b *box) (*control, error) {
	if err := checkInit(b.cfg.Executable); err != nil {
		return nil, err
	}
	if !b.pl.NoNamespaces || b.pl.Scratch == "" {
		return nil, errors.New("airlock bug: the landlock backend was given a plan compiled for another backend (nothing was started)")
	}
	// Every connect(2) of the sandbox waits for the broker, which reads it
	// with pidfd_getfd and process_vm_readv. Where those are refused (a
	// container runtime's default seccomp profile), the broker refuses
	// every connect, the egress proxy's too, without a denial to show.
	brokerErr := connbroker.Probe()
	if brokerErr != nil && b.pl.Proxy {
		return nil, fmt.Errorf("the landlock backend answers every connect(2) of the sandbox in airlock's connect broker, which cannot work here: %v, most likely by the seccomp profile airlock runs under (the default profiles of containerd and Docker allow pidfd_getfd only with CAP_SYS_PTRACE); with net_hosts the sandbox could reach nothing, so nothing was started: run airlock under a seccomp profile that allows pidfd_open, pidfd_getfd and process_vm_readv (in Kubernetes a Localhost profile, or seccompProfile Unconfined for airlock's container: airlock installs its own filter for the sandbox), or drop net_hosts", brokerErr)
	}
	// Made here, empty and the sandbox's alone: mkdir fails on a name that
	// exists, and $TMPDIR's sticky bit keeps others from replacing it.
	scratch := b.pl.Scratch
	if err := os.Mkdir(scratch, 0o700); err != nil {
		return nil, fmt.Errorf("scratch folder: %w (set TMPDIR to a writable folder)", err)
	}
	var as metabroker.Identity // the caller until the sandbox's uid is known
	cleanup := func() { removeScratch(scratch, as) }
	id := unsharedIdentity(b.pl)
	if os.Geteuid() == 0 {
		// Never root: the scratch folder is the sandbox's, and every grant
		// must be reachable by the uid it runs as.
		err := os.Chown(scratch, id.UID, id.GID)
		if err != nil {
			err = fmt.Errorf("scratch folder: give it to uid %d: %w", id.UID, err)
		} else {
			err = checkReach(b.pl, id)
		}
		if err != nil {
			cleanup()
			return nil, err
		}
		b.pl.IDMap.HostUID, b.pl.IDMap.HostGID = uint32(id.UID), uint32(id.GID)
		b.sandboxID, b.sandboxGID = id.UID, id.GID
		as = id.Identity
	}
	if err := b.openStageAndLimits(BackendLandlock, func() (*limits, error) { return newLimits(b.pl.Limits, b.sink) }); err != nil {
		cleanup()
		return nil, err
	}
	if ub.why != "" {
		b.downgraded(policy.DowngradeNamespaces)
		b.enf.Weaker = append(b.enf.Weaker, "namespaces: "+ub.why)
	}
	b.enf.Weaker = append(b.enf.Weaker, weakerUnshared...)
	b.enf.Weaker = append(b.enf.Weaker, weakerUID(id))
	if brokerErr != nil {
		b.enf.Weaker = append(b.enf.Weaker, weakerBrokers(brokerErr))
	}
	for _, m := range b.pl.Mounts {
		if m.Writable && !m.File {
			b.downgraded(policy.DowngradeStagedWrites)
			break
		}
	}
	in, err := startInit(b.cfg.Executable, 0, b.lim.group, false)
	var ctl *control
	if err == nil {
		ctl, err = in.handOver(b)
	}
	if err != nil {
		b.lim.finish(b)
		b.stage.close()
		cleanup()
		return nil, err
	}
	ctl.onExit = cleanup
	ctl.watch(func(stop <-chan struct{}) { watchScratch(b, scratch, stop) })
	return ctl, nil
}

// watchScratch halts the sandbox when its scratch folder holds more than
// max_scratch: without a tmpfs of that size, a look every 250 ms is the
// bound (RLIMIT_FSIZE bounds each file).
func watchScratch(b *box, dir string, stop <-chan struct{}) {
	limit := b.pl.Limits.Scratch
	if limit <= 0 {
		return
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		used, entries, err := diskUsage(dir, 1<<16)
		msg := ""
		switch {
		case err != nil:
			// Fail closed: what cannot be measured (a folder made
			// unreadable) could hold anything.
			msg = fmt.Sprintf("the sandbox's scratch folder could not be measured against max_scratch (%v), and the sandbox was stopped with everything running in it", err)
		case used > limit || entries >= 1<<16:
			msg = fmt.Sprintf("the sandbox wrote more than max_scratch (%d bytes) to its scratch folder, or more than 65536 entries, and was stopped with everything running in it", limit)
		}
		if msg != "" {
			b.halt(budget.MaxScratch, msg)
			b.kill()
			return
		}
	}
}

// removeScratch removes the scratch folder, making every folder in it
// ours to list and empty first: the sandbox may have made one unreadable.
// It never follows a symlink; the folders are opened up as the sandbox's
// uid as (the zero Identity: as the caller), so a path the sandbox swapped
// for a symlink meanwhile reaches nothing the sandbox could not chmod
// itself.
func removeScratch(dir string, as metabroker.Identity) {
	if os.RemoveAll(dir) == nil {
		return
	}
	chmodAll := func() error {
		return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = unix.Fchmodat(unix.AT_FDCWD, p, 0o700, unix.AT_SYMLINK_NOFOLLOW) // before WalkDir reads it
			}
			return nil
		})
	}
	if as != (metabroker.Identity{}) && os.Geteuid() == 0 {
		_ = as.Do(chmodAll)
	} else {
		_ = chmodAll()
	}
	_ = os.RemoveAll(dir)
}

// diskUsage returns the bytes allocated under dir and the entries seen,
// stopping at max entries, or the first error that left part of it
// unread (an entry removed during the walk is not one). It never follows a
// symlink.
func diskUsage(dir string, max int) (int64, int, error) {
	var used int64
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		n++
		if n >= max {
			return filepath.SkipAll
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				used += st.Blocks * 512
			}
		}
		return nil
	})
	return used, n, err
}

// broker is the box's side of connect(2) without namespaces: the two
// loopback listeners the egress proxy serves on, reachable only through
// connections the broker makes (their source ports are recorded before
// the connect, and the listeners close anything else).
type broker struct {
	b           *box
	http, socks netip.AddrPort

	mu     sync.Mutex
	issued map[uint16]bool // guarded by mu: source ports of connections the broker made
}

// serveBroker serves the egress proxy on loopback and answers the
// sandbox's connects on the seccomp listener fds[0].
func (b *box) serveBroker(ctl *control, fds []int) {
	if len(fds) != 1 {
		closeFDs(fds)
		b.log.Error("sandbox: broker message without its one listener fd", "got", len(fds))
		b.kill() // fail closed: nobody would answer connect
		return
	}
	br := &broker{b: b, issued: map[uint16]bool{}}
	if b.pl.Proxy {
		if err := br.listen(); err != nil {
			b.log.Error("egress", "err", err) // no proxy: every connect is refused
		}
	}
	mb, err := metabroker.New(metabroker.Config{Grants: b.metadataGrants(), Identity: b.sandboxIdentity(), Protected: b.protectedWhy, Deny: b.metadataDenied})
	if err != nil {
		unix.Close(fds[0])
		b.log.Error("sandbox: metadata broker", "err", err)
		b.kill() // fail closed: nobody would answer chmod
		return
	}
	ctl.watch(func(stop <-chan struct{}) {
		// Serve owns the listener and closes it.
		err := connbroker.Handler{Decide: br.decide, Syscall: mb.Handle}.Serve(fds[0], stop)
		mb.Close()
		if err != nil {
			b.log.Error("sandbox: connect and metadata broker", "err", err)
			b.kill()
		}
	})
}

// sandboxIdentity is the uid and gid the sandbox runs as.
func (b *box) sandboxIdentity() metabroker.Identity {
	if b.pl.IDMap.HostUID != 0 {
		return metabroker.Identity{UID: int(b.pl.IDMap.HostUID), GID: int(b.pl.IDMap.HostGID)}
	}
	return metabroker.Identity{UID: os.Getuid(), GID: os.Getgid()}
}

// metadataGrants are where the sandbox may change metadata: its fs_write
// grants and its scratch folder.
func (b *box) metadataGrants() []string {
	grants := []string{b.pl.Scratch}
	for _, m := range b.pl.Mounts {
		if m.Grant() && m.Writable {
			grants = append(grants, m.Target)
		}
	}
	return grants
}

// protectedWhy says why path is a protected path of the policy, or "".
func (b *box) protectedWhy(path string) string {
	if pr := b.cfg.Policy.ProtectedBy(path); pr != nil {
		return pr.Why
	}
	return ""
}

// metadataDenied reports a refusal of the metadata broker.
func (b *box) metadataDenied(d metabroker.Denial) {
	b.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Deny, Layer: audit.LayerFS, Op: d.Op, Target: d.Path, Rule: policy.FSWrite.String(), Message: d.Message, Hint: d.Hint})
}

// listen makes the proxy's two loopback listeners and serves it on them.
func (br *broker) listen() error {
	var fds []int
	for _, dst := range []*netip.AddrPort{&br.http, &br.socks} {
		fd, ap, err := loopbackListener()
		if err != nil {
			closeFDs(fds)
			return err
		}
		*dst = ap
		fds = append(fds, fd)
	}
	br.b.serveProxyOn(fds, br.admit)
	return nil
}

// admit reports whether c was made by the broker (and forgets its port).
func (br *broker) admit(c net.Conn) bool {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil || !ap.Addr().IsLoopback() {
		return false
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	ok := br.issued[ap.Port()]
	delete(br.issued, ap.Port())
	return ok
}

// decide answers one connect(2) of the sandbox: to the proxy's ports on
// loopback, a connection the broker makes to the real proxy; to anything
// else, EACCES and a denial in the report.
func (br *broker) decide(r connbroker.Request) connbroker.Verdict {
	var subject string
	switch r.Family {
	case unix.AF_INET, unix.AF_INET6:
		subject = r.Addr.String()
		if r.Addr.Addr().IsLoopback() && br.http.IsValid() {
			switch r.Addr.Port() {
			case plan.HTTPProxyPort:
				return br.dial(br.http)
			case plan.SOCKSProxyPort:
				return br.dial(br.socks)
			}
		}
	case unix.AF_UNIX:
		subject = "unix socket " + r.Path
	default:
		subject = fmt.Sprintf("address family %d", r.Family)
	}
	msg := "connect to " + subject + " refused: without namespaces the sandbox reaches the network only through airlock's egress proxy (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY)"
	hint := "use the proxy for a host in net_hosts; the host's own ports, unix sockets and direct connections are never reachable from this backend"
	if !br.b.pl.Proxy {
		msg = "connect to " + subject + " refused: the policy grants no net_hosts, so the sandbox has no network"
		hint = "add the host to net_hosts to reach it through the egress proxy"
	}
	br.b.sink.Emit(audit.Event{Time: time.Now(), Kind: audit.Deny, Layer: audit.LayerNet, Op: "connect", Target: subject, Rule: policy.NetHosts.String(), Message: msg, Hint: hint})
	return connbroker.Verdict{Errno: unix.EACCES}
}

// dial connects a new TCP socket to the proxy listener at ap, having
// recorded its source port so the listener admits it.
func (br *broker) dial(ap netip.AddrPort) connbroker.Verdict {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return connbroker.Verdict{Errno: unix.ENOBUFS}
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return connbroker.Verdict{Errno: unix.EADDRNOTAVAIL}
	}
	sa, err := unix.Getsockname(fd)
	in4, ok := sa.(*unix.SockaddrInet4)
	if err != nil || !ok {
		unix.Close(fd)
		return connbroker.Verdict{Errno: unix.EADDRNOTAVAIL}
	}
	port := uint16(in4.Port)
	br.mu.Lock()
	br.issued[port] = true
	br.mu.Unlock()
	if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}); err != nil {
		br.mu.Lock()
		delete(br.issued, port)
		br.mu.Unlock()
		unix.Close(fd)
		return connbroker.Verdict{Errno: unix.ECONNREFUSED}
	}
	return connbroker.Verdict{Conn: os.NewFile(uintptr(fd), "proxy connection")}
}

// loopbackListener returns a listening TCP socket on 127.0.0.1 and its
// address.
func loopbackListener() (int, netip.AddrPort, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, netip.AddrPort{}, fmt.Errorf("proxy listener: %w", err)
	}
	err = unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	if err == nil {
		err = unix.Listen(fd, 128)
	}
	if err != nil {
		unix.Close(fd)
		return -1, netip.AddrPort{}, fmt.Errorf("proxy listener on 127.0.0.1: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	in4, ok := sa.(*unix.SockaddrInet4)
	if err != nil || !ok {
		unix.Close(fd)
		return -1, netip.AddrPort{}, errors.New("proxy listener: no IPv4 address")
	}
	return fd, netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port)), nil
}
