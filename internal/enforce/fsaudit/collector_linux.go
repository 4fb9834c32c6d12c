package fsaudit

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// minABI is the first Landlock ABI whose kernel logs denials to audit
// (Linux 6.15: AUDIT_LANDLOCK_ACCESS, AUDIT_LANDLOCK_DOMAIN and the
// landlock_restrict_self(2) LOG flags).
const minABI = 7

// readlogGroup is the nl_groups bit of AUDIT_NLGRP_READLOG (Linux 3.16):
// a read-only copy of every record, for any number of readers with
// CAP_AUDIT_READ, next to (not instead of) the audit daemon.
const readlogGroup = 1 << (unix.AUDIT_NLGRP_READLOG - 1)

// rcvBuf is the receive buffer asked for, so that a burst of records does
// not overflow the socket while the reader is scheduled out.
const rcvBuf = 4 << 20

// Available returns nil when Start can read Landlock denial records here:
// Landlock ABI 7 or later (Linux 6.15), a kernel with audit, and a caller
// with CAP_AUDIT_READ and CAP_AUDIT_CONTROL in the initial user and pid
// namespaces (root on the host). Otherwise the error, which wraps
// ErrUnavailable, says why; `airlock doctor` and the run report show it.
// Audit being off is not an error: Start turns it on.
func Available() error {
	if abi := landlockABI(); abi < minABI {
		return fmt.Errorf("fsaudit: landlock ABI %d: denial records need ABI %d (Linux 6.15 with CONFIG_AUDIT) (%w)", abi, minABI, ErrUnavailable)
	}
	fd, err := openAudit(readlogGroup)
	if err != nil {
		return err
	}
	unix.Close(fd)
	_, err = getStatus()
	return err
}

// Start opens the audit log for reading and returns a Collector. It joins
// the netlink multicast group AUDIT_NLGRP_READLOG, which never conflicts
// with an audit daemon, and, unless opts.NoEnable is set, turns the
// kernel's audit on when it is off: Landlock logs nothing while audit is
// disabled. The error wraps ErrUnavailable when records cannot be read
// here (see Available).
func Start(opts Options) (*Collector, error) {
	if abi := landlockABI(); abi < minABI {
		return nil, fmt.Errorf("fsaudit: landlock ABI %d: denial records need ABI %d (Linux 6.15 with CONFIG_AUDIT) (%w)", abi, minABI, ErrUnavailable)
	}
	fd, err := openAudit(readlogGroup)
	if err != nil {
		return nil, err
	}
	// SO_RCVBUFFORCE (socket(7), Linux 2.6.14) passes rmem_max as root;
	// without it the default buffer holds fewer records, nothing worse.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf) // best effort, as above
	}
	// The socket is joined before audit is enabled, so no record the
	// change produces is missed.
	st, err := getStatus()
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	enabled := false
	if st.Enabled == 0 {
		if opts.NoEnable {
			unix.Close(fd)
			return nil, ErrAuditDisabled
		}
		if err := setEnabled(true); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("fsaudit: %w", err)
		}
		enabled = true
	}
	selfTest := opts.SelfTestPath
	if selfTest == "" {
		selfTest = "/"
	}
	// A non-blocking fd in an *os.File uses the runtime poller, so Close
	// interrupts the pending Read.
	f := os.NewFile(uintptr(fd), "netlink-audit")
	c := &Collector{t: newTracker(selfTest, threadGroup)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.read(f)
	}()
	c.stop = func() error {
		err := f.Close()
		<-done
		if enabled {
			if rerr := restore(); rerr != nil && err == nil {
				err = rerr
			}
		}
		return err
	}
	return c, nil
}

// read receives records until f is closed. Each datagram of the group
// holds one record; its nlmsg_len counts the text without alignment
// padding, which syscall.ParseNetlinkMessage refuses, hence the direct
// parse.
func (c *Collector) read(f *os.File) {
	buf := make([]byte, 64<<10) // MAX_AUDIT_MESSAGE_LENGTH is 8970
	for {
		n, err := f.Read(buf)
		switch {
		case errors.Is(err, unix.ENOBUFS):
			c.t.overflow() // the socket overflowed: records were dropped
			continue
		case errors.Is(err, os.ErrClosed), errors.Is(err, io.EOF):
			return
		case err != nil:
			// No other error is expected from a netlink socket; count it
			// as lost records rather than spin on it.
			c.t.overflow()
			return
		}
		c.handle(buf[:n])
	}
}

// Sync returns once every record the kernel queued before the call has
// been read, or when ctx ends (with its error). A denied syscall queues its
// record before it returns, so after Sync a run's Denials include every
// denial of the processes that have exited, even while its domain lives on
// (a session between execs).
//
// It writes one AUDIT_USER record carrying a random marker (which needs
// CAP_AUDIT_WRITE, as reading needs CAP_AUDIT_READ) and waits to read it
// back: the kernel delivers records in the order it queued them. Like
// the denials, that record also reaches auditd or the kernel log.
func (c *Collector) Sync(ctx context.Context) error {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
	nonce := hex.EncodeToString(b[:])
	ch := c.awaitMarker(nonce)
	defer c.forgetMarker(nonce)
	// A C string: the kernel drops the payload's last byte.
	if _, err := auditRequest(unix.AUDIT_USER, []byte(syncMarker+nonce+"\x00")); err != nil {
		return fmt.Errorf("fsaudit: write the sync record: %w", err)
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handle dispatches one datagram.
func (c *Collector) handle(b []byte) {
	if len(b) < unix.NLMSG_HDRLEN {
		return
	}
	l := int(binary.NativeEndian.Uint32(b[0:]))
	text := b[unix.NLMSG_HDRLEN:min(max(l, unix.NLMSG_HDRLEN), len(b))]
	switch binary.NativeEndian.Uint16(b[4:]) {
	case typeLandlockAccess:
		if r, ok := parseAccess(text); ok {
			c.t.access(r)
		}
	case typeLandlockDomain:
		if r, ok := parseDomainRecord(text); ok {
			c.t.domainEvent(r)
		}
	case unix.AUDIT_USER:
		c.markerRead(text)
	}
}

// restore turns audit off again, unless someone else now relies on it: an
// audit daemon registered meanwhile, another reader (collector or not) is
// joined to a multicast group, or audit was locked or turned off already.
// Two collectors in different processes can therefore leave audit on;
// they never turn it off under each other.
func restore() error {
	readers, err := otherReaders()
	if err != nil {
		return fmt.Errorf("fsaudit: leave kernel audit on: list netlink sockets: %w", err)
	}
	if readers > 0 {
		return nil
	}
	st, err := getStatus()
	if err != nil {
		return fmt.Errorf("fsaudit: leave kernel audit on: %w", err)
	}
	if st.Enabled != 1 || st.Pid != 0 {
		return nil
	}
	if err := setEnabled(false); err != nil {
		return fmt.Errorf("fsaudit: %w", err)
	}
	return nil
}
