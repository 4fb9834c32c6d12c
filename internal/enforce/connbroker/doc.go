// Package connbroker is the supervisor side of the seccomp user
// notification broker for connect(2): the whole network of the sandbox
// backend that runs without namespaces, and the transparent egress of the
// namespace backend. The sandboxed program's filter answers connect
// with SECCOMP_RET_USER_NOTIF (plan.ActNotify); the supervisor holds the
// filter's listener (seccomp.InstallListener) and calls Serve on it. For
// each intercepted connect Serve reads the destination from the target,
// asks a decide callback, and either installs a connection the supervisor
// made itself at the target's fd number or fails the connect with the
// errno decide names (seccomp_unotify(2)). A Handler splits decide in
// two: Quick answers at once, on the goroutine that received the
// notification, what needs no dialing; Decide, on a goroutine of its own,
// the rest.
//
// It stops a sandboxed program from reaching a destination the policy
// does not grant, including by changing the address after the check. The
// sockaddr a connect points to lives in the target's memory, which any
// other thread of the target can rewrite at any moment. Had the broker
// answered SECCOMP_USER_NOTIF_FLAG_CONTINUE, the kernel would run the
// target's own connect and read that memory again, after the check: a
// time-of-check-to-time-of-use race that a second thread wins by flipping
// the bytes in a loop. So in the host's network namespace the broker never
// answers CONTINUE. It reads the
// sockaddr once, into its own buffer; decide sees only that copy and, to
// allow, dials the destination it checked from the supervisor and hands
// back that socket; the broker moves it into the target with
// SECCOMP_IOCTL_NOTIF_ADDFD. The address checked is the address used,
// because only the supervisor's own sockets are ever connected.
//
// The namespace backend's sandbox has a network namespace of its own that
// holds only lo, so the kernel's own connect can reach nothing but the
// sandbox's loopback there, whatever the address: its decide answers
// Continue for what the namespace can reach by itself (loopback, unix
// sockets), where a race on the sockaddr gains nothing, and Connect for a
// granted destination outside: the broker connects the target's own
// socket, in the target's namespace, to the egress proxy's listener on
// that loopback, which the supervisor told beforehand where the
// connection is going. Both need the socket to be the sandbox's
// (Request.NetNS), which decide checks.
//
// Fail closed:
//   - when the supervisor dies or closes the listener, the kernel fails
//     every pending and every later connect under the filter with ENOSYS;
//     nothing falls back to letting the call through;
//   - a notification the broker cannot read completely (the target's
//     memory, fd or fdinfo) is refused, and so is a zero Verdict;
//   - the filter must never let a connection out another way: no rule may
//     allow connect for any argument, and the other syscalls that reach
//     a destination named in memory need rules of their own (sendto and
//     sendmsg with an address: UDP datagrams, and TCP Fast Open, whose
//     MSG_FASTOPEN connects a TCP socket; io_uring's connect). The broker
//     sees only what the filter hands it.
//
// The Linux half (broker_linux.go) needs Linux 5.9 (ADDFD with
// SECCOMP_ADDFD_FLAG_SETFD) and pidfd_getfd(2), and reads /proc for the
// supervisor's pid namespace. Elsewhere Serve returns an error wrapping
// errors.ErrUnsupported. Like every internal/enforce package it never
// imports net/http, egress, server or mcp; decide is where the policy and
// the dialing live.
package connbroker
