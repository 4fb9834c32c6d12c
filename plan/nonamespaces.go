package plan

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

// ErrNeedsNamespaces wraps what a policy asks for that only the namespace
// backend can enforce.
var ErrNeedsNamespaces = errors.New("plan: needs namespaces")

// withoutNamespaces turns pl, compiled by Compile for the namespace
// backend, into the plan of the backend without namespaces, in place.
// Nothing is mounted there: the host's filesystem is what the sandbox
// sees, and Landlock is what confines it. So pl keeps only the grant and
// tool steps (the paths the file API and the diagnoses name), its rules
// are the same grants, tools and system base with the host's paths for the
// few files the namespace backend synthesizes, scratch (an empty folder
// the caller made, owned by the sandbox's uid) stands in for the private
// /tmp, and the seccomp profile sends connect(2) to the supervisor and
// refuses what a network namespace used to contain (see
// WithoutNamespacesSeccomp).
//
// It refuses, with ErrNeedsNamespaces, what Landlock cannot express:
// fs_deny and fs_protect paths inside grants (Landlock only adds rights,
// so nothing beneath a granted folder can be taken away), and fs_write
// folders unless p accepts the staged_writes downgrade (they are written
// in place: max_write is not enforced and the built-in protected paths
// inside them cannot be kept read-only).
func withoutNamespaces(pl *Plan, p *policy.Policy, scratch string) error {
	if !strings.HasPrefix(scratch, "/") || pathspec.Clean(scratch) != scratch {
		return fmt.Errorf("airlock bug: scratch folder %q is not absolute and clean", scratch)
	}
	if err := needsNamespaces(pl, p); err != nil {
		return err
	}
	WithoutTransparentEgress(pl)
	writesInPlace(pl)
	var mounts []Mount
	for _, m := range pl.Mounts {
		if m.Kind == KindBind && m.Origin != OriginBase && m.Origin != OriginSandbox {
			m.IDMap, m.Recursive = false, false
			mounts = append(mounts, m)
		}
	}
	pl.Mounts = mounts
	var rules []Rule
	for _, r := range pl.Rules {
		if r.Origin != OriginSandbox {
			rules = append(rules, r)
		}
	}
	for _, f := range []string{"/etc/passwd", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf", "/proc"} {
		rules = append(rules, Rule{Path: f, Access: Read, Origin: OriginSandbox})
	}
	for _, d := range devices {
		rules = append(rules, Rule{Path: d, Access: Read | Write, Origin: OriginSandbox})
	}
	rules = append(rules, Rule{Path: scratch, Access: Read | Write, Origin: OriginSandbox})
	pl.Rules = rules
	pl.Namespaces = []Namespace{}
	pl.NoNamespaces = true
	pl.Scratch = scratch
	pl.Hostname = ""
	pl.ProcFallback = false
	pl.RequireLandlock = true
	pl.MaskedPaths, pl.ReadonlyPaths = []string{}, []string{}
	pl.Protected = nil
	if !p.CanRead(pl.Cwd) {
		pl.Cwd = InScratch(pl.Cwd, scratch) // a grant under /tmp stays where it is
	}
	for i, e := range pl.Env {
		if k, v, ok := strings.Cut(e, "="); ok && (k == "HOME" || k == "TMPDIR") {
			pl.Env[i] = k + "=" + InScratch(v, scratch)
		}
	}
	pl.Seccomp = WithoutNamespacesSeccomp(pl.Seccomp)
	return nil
}

// writesInPlace makes pl's staged fs_write grants plain read-write binds of
// the host paths, in place, and drops the stage: for a backend that cannot
// stage (no mount namespace, or gVisor, whose gofer has no overlay of a
// host folder). max_write and the write-back refusals then do not apply;
// the protected paths' read-only steps stay where a backend mounts them.
func writesInPlace(pl *Plan) {
	mounts := pl.Mounts[:0:0]
	for _, m := range pl.Mounts {
		switch m.Kind {
		case KindStage:
			continue
		case KindOverlay, KindStagedFile:
			m = Mount{Kind: KindBind, Source: m.Source, Target: m.Target, Writable: true, File: m.Kind == KindStagedFile, IDMap: m.IDMap, Recursive: m.Recursive, Origin: m.Origin}
		}
		mounts = append(mounts, m)
	}
	pl.Mounts = mounts
}

// InScratch maps a path under the namespace backend's private /tmp to the
// same path under scratch. The caller keeps a path that is in a grant.
func InScratch(p, scratch string) string {
	if p == "/tmp" {
		return scratch
	}
	if rest, ok := strings.CutPrefix(p, "/tmp/"); ok {
		return pathspec.Join(scratch, rest)
	}
	return p
}

// needsNamespaces reports what in pl only a mount namespace can enforce.
func needsNamespaces(pl *Plan, p *policy.Policy) error {
	var why []string
	folders := false
	for _, m := range pl.Mounts {
		folders = folders || m.Kind == KindOverlay
	}
	// Refused whether the path exists now or not: the sandbox or the host
	// could create it while the run lasts.
	for _, d := range p.FSDeny() {
		why = append(why, fmt.Sprintf("fs_deny %s: Landlock only adds rights, so a path inside a grant cannot be hidden; grant the folders beside it instead", d))
	}
	for _, f := range p.FSProtect() {
		why = append(why, fmt.Sprintf("fs_protect %s: Landlock only adds rights, so a path inside an fs_write grant cannot be kept read-only; grant the folders beside it instead", f))
	}
	if folders && !p.AcceptsDowngrade(policy.DowngradeStagedWrites) {
		why = append(why, "fs_write folders are written in place without namespaces: max_write is not enforced and their protected paths (git hooks and config, shell rc files, editor and CI configuration) cannot be kept read-only; add staged_writes to allow_downgrade to accept that, or grant single files")
	}
	if len(why) == 0 {
		return nil
	}
	slices.Sort(why)
	return fmt.Errorf("%w: the backend without namespaces cannot enforce this policy: %s", ErrNeedsNamespaces, strings.Join(why, "; "))
}

// Socket and message constants for the profile without namespaces
// (linux/socket.h, linux/net.h).
const (
	sockSeqpacket = 5          // SOCK_SEQPACKET
	msgFastOpen   = 0x20000000 // MSG_FASTOPEN: sendto/sendmsg that connects (TCP Fast Open)
)

// File constants for the profile without namespaces (asm-generic/fcntl.h,
// linux/stat.h, linux/falloc.h, linux/fs.h, linux/fsverity.h,
// linux/fscrypt.h), the same on amd64 and arm64. A Linux test of
// internal/enforce/metabroker checks them against x/sys.
const (
	oCreat   = 0o100      // O_CREAT
	oTmpfile = 0o20000000 // __O_TMPFILE: O_TMPFILE without O_DIRECTORY
	sISUID   = 0o4000     // S_ISUID
	sISGID   = 0o2000     // S_ISGID

	fallocKeepSizePunchHole = 0x03 // FALLOC_FL_KEEP_SIZE|FALLOC_FL_PUNCH_HOLE: frees, never allocates

	fsIocSetflags            = 0x40086602 // FS_IOC_SETFLAGS
	fsIoc32Setflags          = 0x40046602 // FS_IOC32_SETFLAGS
	fsIocFssetxattr          = 0x401c5820 // FS_IOC_FSSETXATTR
	fsIocSetversion          = 0x40087602 // FS_IOC_SETVERSION
	fsIoc32Setversion        = 0x40047602 // FS_IOC32_SETVERSION
	fsIocEnableVerity        = 0x40806685 // FS_IOC_ENABLE_VERITY
	fsIocSetEncryptionPolicy = 0x800c6613 // FS_IOC_SET_ENCRYPTION_POLICY
)

// MetadataSyscalls are the calls that change a file's mode, owner, times or
// extended attributes. Landlock has no right for them, so without
// namespaces the filter hands every one to the supervisor, whose metadata
// broker (internal/enforce/metabroker) carries it out beneath the
// fs_write grants and refuses the rest. A name the architecture lacks is
// skipped.
var MetadataSyscalls = []string{
	"chmod", "fchmod", "fchmodat", "fchmodat2",
	"chown", "fchown", "fchownat", "lchown",
	"utime", "utimes", "futimesat", "utimensat",
	"setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
}

// inodeAttrIoctls change what chattr(1) and fs-verity and fscrypt set on
// an inode: flags (immutable, append-only, nodump), project ids and
// extended flags, the inode's generation, a verity seal, an encryption
// policy. The kernel checks ownership for them, not Landlock, so the
// profile without namespaces refuses them on every file.
var inodeAttrIoctls = []uint64{fsIocSetflags, fsIoc32Setflags, fsIocFssetxattr, fsIocSetversion, fsIoc32Setversion,
	fsIocEnableVerity, fsIocSetEncryptionPolicy}

// WithoutNamespacesSeccomp returns s for a sandbox that shares the host's
// network, IPC and pid namespaces:
//
//   - connect(2) goes to the supervisor (ActNotify), which connects the
//     egress proxy itself and hands the socket back, or refuses. Nothing
//     else can connect: Landlock (ABI 4) refuses every TCP connect and
//     bind the kernel would make for the sandbox, and sendto, sendmsg and
//     sendmmsg with MSG_FASTOPEN (a connect by another name) are refused.
//   - socket(2) makes only TCP over AF_INET and AF_INET6, and stream or
//     seqpacket AF_UNIX sockets: no UDP (no DNS, no datagrams to the
//     host's syslog or anything else), raw, packet or netlink sockets.
//     socketpair keeps AF_UNIX stream and seqpacket pairs.
//   - listen(2) is refused: the host's ports are not the sandbox's.
//   - System V IPC and POSIX message queues are refused: they are the
//     host's.
//   - The metadata calls (MetadataSyscalls) go to the supervisor too,
//     whose metadata broker carries them out beneath the fs_write grants;
//     the ioctls that set inode attributes (chattr's flags, fs-verity,
//     fscrypt policies) are refused.
//   - No file is created with a set-user-ID or set-group-ID bit: open,
//     openat and creat with O_CREAT or O_TMPFILE, and mknod and mknodat,
//     are refused for such a mode; openat2, whose mode the filter cannot
//     read, answers ENOSYS (C libraries fall back to openat).
//   - fallocate answers EOPNOTSUPP (glibc's posix_fallocate then writes
//     the range, which RLIMIT_FSIZE and the scratch watcher see), except
//     to punch a hole: a reservation would put space on the host's disk
//     faster than max_scratch's check sees it.
func WithoutNamespacesSeccomp(s Seccomp) Seccomp {
	eq := func(arg int, v uint64) ArgCond { return ArgCond{Arg: arg, Mask: all64, Value: v} }
	allowIf := func(conds ...ArgCond) SyscallRule { return SyscallRule{Action: ActAllow, Conds: conds} }
	typ := func(t uint64) ArgCond { return ArgCond{Arg: 1, Mask: sockTypeMask, Value: t} }
	var socket []SyscallRule
	for _, t := range []uint64{sockStream, sockSeqpacket} {
		socket = append(socket, allowIf(eq(0, afUnix), typ(t)))
	}
	for _, family := range []uint64{afInet, afInet6} {
		for _, proto := range []uint64{ipprotoIP, ipprotoTCP} {
			socket = append(socket, allowIf(eq(0, family), typ(sockStream), eq(2, proto)))
		}
	}
	var pair []SyscallRule
	for _, t := range []uint64{sockStream, sockSeqpacket} {
		pair = append(pair, allowIf(eq(0, afUnix), typ(t)))
	}
	noFastOpen := func(arg int) []SyscallRule {
		return []SyscallRule{{Action: ActEPERM, Conds: []ArgCond{{Arg: arg, Mask: msgFastOpen, Value: msgFastOpen}}}, {Action: ActAllow}}
	}
	// creat(path, mode), open(path, flags, mode), openat(dirfd, path,
	// flags, mode), mknod(path, mode, dev), mknodat(dirfd, path, mode, dev).
	setID := func(modeArg, flagsArg int, creates ...uint64) []SyscallRule {
		var rules []SyscallRule
		for _, bit := range []uint64{sISUID, sISGID} {
			mode := ArgCond{Arg: modeArg, Mask: bit, Value: bit}
			if flagsArg < 0 {
				rules = append(rules, SyscallRule{Action: ActEPERM, Conds: []ArgCond{mode}})
				continue
			}
			for _, c := range creates {
				rules = append(rules, SyscallRule{Action: ActEPERM, Conds: []ArgCond{{Arg: flagsArg, Mask: c, Value: c}, mode}})
			}
		}
		return append(rules, SyscallRule{Action: ActAllow})
	}
	const noSetID = "never with a set-user-ID or set-group-ID bit in the mode of a file it creates"
	replace := map[string]Syscall{
		"open":       {Why: noSetID, Rules: setID(2, 1, oCreat, oTmpfile)},
		"openat":     {Why: noSetID, Rules: setID(3, 2, oCreat, oTmpfile)},
		"creat":      {Why: noSetID, Rules: setID(1, -1)},
		"mknod":      {Why: noSetID, Rules: setID(1, -1)},
		"mknodat":    {Why: noSetID, Rules: setID(2, -1)},
		"openat2":    {Why: "ENOSYS: its mode is in memory the filter cannot read, so a set-user-ID file could be created; C libraries fall back to openat", Rules: []SyscallRule{{Action: ActENOSYS}}},
		"fallocate":  {Why: "EOPNOTSUPP (glibc's posix_fallocate writes the range instead), but for punching a hole: a reservation outruns the scratch watcher", Rules: []SyscallRule{{Action: ActAllow, Conds: []ArgCond{eq(1, fallocKeepSizePunchHole)}}, {Action: ActEOPNOTSUPP}}},
		"connect":    {Why: "answered by the supervisor: it connects the egress proxy itself and hands that socket back, or refuses", Rules: []SyscallRule{{Action: ActNotify}}},
		"socket":     {Why: "TCP over AF_INET and AF_INET6, stream and seqpacket AF_UNIX: no UDP, raw, packet or netlink", Rules: socket},
		"socketpair": {Why: "AF_UNIX stream and seqpacket pairs", Rules: pair},
		"sendto":     {Why: "not with MSG_FASTOPEN, which connects", Rules: noFastOpen(3)},
		"sendmsg":    {Why: "not with MSG_FASTOPEN, which connects", Rules: noFastOpen(2)},
		"sendmmsg":   {Why: "not with MSG_FASTOPEN, which connects", Rules: noFastOpen(3)},
	}
	refused := map[string]bool{"listen": true}
	for _, n := range []string{"msgctl", "msgget", "msgrcv", "msgsnd", "semctl", "semget", "semop", "semtimedop", "shmat", "shmctl", "shmdt", "shmget",
		"mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink"} {
		refused[n] = true
	}
	for _, n := range MetadataSyscalls {
		replace[n] = Syscall{Why: "answered by the supervisor: its metadata broker makes the change beneath the fs_write grants, or refuses", Rules: []SyscallRule{{Action: ActNotify}}}
	}
	out := Seccomp{Default: s.Default, Refused: slices.Clone(s.Refused)}
	var gone []string
	for _, sc := range s.Syscalls {
		if refused[sc.Name] {
			gone = append(gone, sc.Name)
			continue
		}
		if r, ok := replace[sc.Name]; ok {
			sc.Why, sc.Rules = r.Why, r.Rules
		}
		if sc.Name == "ioctl" {
			var rules []SyscallRule
			for _, req := range inodeAttrIoctls {
				rules = append(rules, SyscallRule{Action: ActEPERM, Conds: []ArgCond{{Arg: 1, Mask: low32, Value: req}}})
			}
			sc.Why = "every request but TIOCSTI and TIOCLINUX, which type into the caller's terminal, and those that set inode attributes (FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, FS_IOC_SETVERSION, fs-verity, fscrypt policies)"
			sc.Rules = append(rules, sc.Rules...)
		}
		out.Syscalls = append(out.Syscalls, sc)
	}
	out.Refused = append(out.Refused, SyscallGroup{Name: "without namespaces",
		Why:   "the host's: listen would open a host port, and System V IPC and message queues are shared with every process of the host",
		Names: gone})
	return out
}
