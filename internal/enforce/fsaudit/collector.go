package fsaudit

import (
	"errors"
	"strings"
	"sync"
)

// ErrUnavailable is wrapped by every error that says Landlock denial
// records cannot be read on this host; the message says why (not root, a
// kernel older than 6.15, audit compiled out or disabled at boot).
var ErrUnavailable = errors.New("fsaudit: filesystem denials cannot be reported")

// ErrAuditDisabled is returned by Start when the kernel's audit is off and
// Options.NoEnable forbids turning it on.
var ErrAuditDisabled = errors.New("fsaudit: kernel audit is disabled and Options.NoEnable is set: run auditctl -e 1, or let airlock enable it")

// Options configures a Collector. The zero Options enables the kernel's
// audit if it is off and drops the self-test denial on "/".
type Options struct {
	// NoEnable forbids Start to turn the kernel's audit on. When audit is
	// off, Start then fails with ErrAuditDisabled. False lets Start
	// enable it (AUDIT_SET enabled=1), which is host-wide: see the
	// package doc.
	NoEnable bool

	// SelfTestPath is the path the sandbox init's Landlock self-test
	// opens right after restricting itself (landlock.Config.SelfTestPath).
	// That expected denial is the first record of the init's domain and is
	// not reported. The empty SelfTestPath means "/", as in
	// landlock.Config.
	SelfTestPath string
}

// Collector reads Landlock denial records from the kernel's audit
// subsystem and attributes them to tracked runs. It is safe for
// concurrent use; one Collector can serve every sandbox of a process.
type Collector struct {
	t *tracker

	syncMu sync.Mutex
	syncs  map[string]chan struct{} // guarded by syncMu: Sync markers awaited

	closeOnce sync.Once
	stop      func() error // releases the socket and the audit setting
	closeErr  error
}

// Track starts collecting the denials of a sandbox whose init has host pid
// pid. Records of every Landlock domain that pid creates are attributed to
// the Run, and so are those of its descendants, which inherit the domain.
// Domains pid created before Track are claimed too, as long as the
// Collector still remembers them; call Track before the init restricts
// itself to be sure. A later Track of the same pid supersedes the earlier
// Run for new domains.
//
// Preconditions:
//   - pid is a host pid (the initial pid namespace), as exec.Cmd reports
//   - the thread that calls landlock_restrict_self(2) is still alive when
//     its domain's first denial is logged (the init's self-test makes that
//     denial right away)
func (c *Collector) Track(pid int) *Run {
	return c.t.track(pid)
}

// syncMarker starts the text of the records Sync writes.
const syncMarker = "airlock-fsaudit-sync "

// awaitMarker registers a Sync marker and returns the channel closed when
// its record is read.
func (c *Collector) awaitMarker(nonce string) chan struct{} {
	ch := make(chan struct{})
	c.syncMu.Lock()
	if c.syncs == nil {
		c.syncs = map[string]chan struct{}{}
	}
	c.syncs[nonce] = ch
	c.syncMu.Unlock()
	return ch
}

func (c *Collector) forgetMarker(nonce string) {
	c.syncMu.Lock()
	delete(c.syncs, nonce)
	c.syncMu.Unlock()
}

// markerRead closes the channel of the marker a user record's text
// carries, if it is one Sync awaits.
func (c *Collector) markerRead(text []byte) {
	s := string(text)
	i := strings.Index(s, syncMarker)
	if i < 0 {
		return
	}
	nonce, _, _ := strings.Cut(s[i+len(syncMarker):], "'")
	nonce = strings.TrimRight(nonce, "\x00")
	c.syncMu.Lock()
	ch, ok := c.syncs[nonce]
	delete(c.syncs, nonce)
	c.syncMu.Unlock()
	if ok {
		close(ch)
	}
}

// Close stops reading records and, when Start turned the kernel's audit
// on and no other reader or audit daemon remains, turns it off again.
// Runs keep the denials they have. Close is idempotent.
func (c *Collector) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.stop() })
	return c.closeErr
}
