package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// How `airlock serve` shares its file descriptors. The sandboxes' own
// limits (nofile 1024 per process, max_pids) do not bound the server: every
// connection a sandboxed process opens to its egress proxy is accepted by
// the server, outside the sandbox. So each session's proxy connections are
// capped at its share of the server's RLIMIT_NOFILE, and a reserve is kept
// for the API (its listener and clients, uploads and downloads, logs).
const (
	// serveMinReserve and serveReserveDiv: the API keeps a quarter of the
	// limit, and at least 256 fds.
	serveMinReserve = 256
	serveReserveDiv = 4
	// serveSessionFixedFDs is what a session holds besides its proxy
	// connections, generously: its control socket and proxy listeners, an
	// exec's pipes, cgroup and audit files.
	serveSessionFixedFDs = 64
	// serveMinConns is the fewest proxy connections a session may be left
	// with before serve refuses to start.
	serveMinConns = 16
)

// fdQuota is how serve splits its fds.
type fdQuota struct {
	nofile   uint64 // RLIMIT_NOFILE (soft) at start
	reserve  uint64 // kept for the API
	sessions int    // the most sessions that can be live at once
	conns    int    // proxy connections each session may hold
}

// serveFDQuota splits nofile fds between the API's reserve and sessions
// live at once: each session gets an equal share, and its proxy
// connections cost two fds each (the sandbox's end and, while tunnelling,
// the upstream).
func serveFDQuota(nofile uint64, sessions int) (fdQuota, error) {
	q := fdQuota{nofile: nofile, sessions: sessions, reserve: max(serveMinReserve, nofile/serveReserveDiv)}
	if sessions <= 0 {
		return q, fmt.Errorf("airlock bug: serve: %d sessions", sessions)
	}
	if nofile > q.reserve {
		share := (nofile - q.reserve) / uint64(sessions)
		if share > serveSessionFixedFDs {
			q.conns = int(min((share-serveSessionFixedFDs)/2, 1<<20))
		}
	}
	if q.conns < serveMinConns {
		return q, fmt.Errorf("RLIMIT_NOFILE %d leaves %d proxy connections to each of %d sessions (after %d fds kept for the API), fewer than %d: raise the limit (ulimit -n) or lower --max-sessions or the number of tokens",
			nofile, q.conns, sessions, q.reserve, serveMinConns)
	}
	return q, nil
}

// nofileLimit returns the process's RLIMIT_NOFILE soft limit (the Go
// runtime has raised it to the hard limit at start).
func nofileLimit() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	return rl.Cur, nil
}
