// Package seccomp builds and installs the syscall filter that is the last
// restriction nsinit applies before it execs the sandboxed command.
//
// It stops a sandboxed program from reaching kernel interfaces it has no use
// for and that have a record of privilege escalation and sandbox escape:
// new namespaces (unshare, setns, clone with CLONE_NEW*), mounts, io_uring,
// eBPF, perf, keyrings, userfaultfd, ptrace, module loading, raw and
// netlink sockets, MPTCP sockets that Landlock's TCP rules do not see, and
// terminal input injection (TIOCSTI). It is an allow-list: a syscall gets
// through only if the profile names it; everything else fails with EPERM.
//
// The portable half turns a Profile (data) into a classic BPF program
// (Build), checks programs as the kernel would (Validate) and runs them in
// an interpreter (Run) so the policy can be tested on any machine. The
// Linux half, Install, loads the program with seccomp(2). Nothing here may
// import net/http, egress, server or mcp; the portable half imports only
// the standard library.
//
// # The profile
//
// DefaultProfile starts from the allow-list of the container runtimes'
// default profile (moby's profiles/seccomp/default.json, without the parts
// it grants only to containers holding extra capabilities) and removes:
//
//   - io_uring_setup, io_uring_enter, io_uring_register: a large, fast
//     moving kernel surface that also performs I/O seccomp never sees.
//   - memfd_create, memfd_secret and execveat: together they let a program
//     exec code that was never on disk (memfd + execveat(AT_EMPTY_PATH)),
//     out of reach of Landlock's execute rights. execve stays.
//   - ptrace, process_vm_readv, process_vm_writev: reading and writing other
//     processes' memory.
//   - name_to_handle_at (open_by_handle_at was never allowed): file handles
//     bypass path-based checks.
//   - adjtimex, clock_adjtime: the sandbox has no business with the clock.
//   - landlock_*: answer ENOSYS, see policy.go.
//
// It keeps out everything moby grants only with capabilities (mount,
// umount2, pivot_root, chroot, the fsopen/fsmount/move_mount/open_tree
// family, unshare, setns, bpf, perf_event_open, kexec_*, module loading,
// acct, swapon/swapoff, reboot, settimeofday, clock_settime, quotactl,
// lookup_dcookie, vhangup, iopl, ioperm, syslog, ...) and what moby never
// allowed (keyctl, add_key, request_key, userfaultfd, uselib, nfsservctl,
// create_module, get_kernel_syms, query_module, ...). It restricts
// arguments for clone (no namespace flags), clone3 (ENOSYS, so libc falls
// back to clone), socket (AF_UNIX, or TCP and UDP over AF_INET and
// AF_INET6), socketpair (AF_UNIX), ioctl (not TIOCSTI or TIOCLINUX) and
// personality (moby's values). The comments in policy.go give the reason
// for each group.
package seccomp
