package fsaudit

import (
	"bytes"
	"encoding/hex"
	"strconv"
	"strings"
)

// Audit record types, from include/uapi/linux/audit.h (Linux 6.15). They
// are repeated here so that the portable half builds on every OS; a Linux
// test checks them against golang.org/x/sys/unix.
const (
	typeLandlockAccess = 1423 // AUDIT_LANDLOCK_ACCESS: one denied request
	typeLandlockDomain = 1424 // AUDIT_LANDLOCK_DOMAIN: a domain's allocation or release
)

// accessRecord is one AUDIT_LANDLOCK_ACCESS record, as written by
// landlock_log_denial() in security/landlock/audit.c:
//
//	domain=<hex id> blockers=<access>[,<access>...] <lsm data>
//
// The lsm data (audit_log_lsm_data() in security/lsm_audit.c) depends on
// the request: path= dev= ino= for most filesystem checks, name= for a
// dentry, daddr= dest= (saddr= src=) for TCP, opid= ocomm= for a signal.
type accessRecord struct {
	domain   uint64
	blockers []string
	fields   map[string]string // the lsm data, untrusted strings decoded
}

// domainRecord is one AUDIT_LANDLOCK_DOMAIN record:
//
//	domain=<hex id> status=allocated mode=enforcing pid=<tid> uid=<uid> exe=<path> comm=<name>
//	domain=<hex id> status=deallocated denials=<count>
//
// pid is the host thread id of the task that called
// landlock_restrict_self(2) (task_pid, not the thread group), in the
// initial pid namespace. The allocation record is logged once, right after
// the domain's first logged denial; the release record only for domains
// that were logged, once no credential refers to the domain any more.
type domainRecord struct {
	domain    uint64
	allocated bool   // status=allocated; false means status=deallocated
	pid       int    // allocation: the creating thread
	denials   uint64 // release: every denial the kernel counted, logged or not
}

// parseAccess parses the text of an AUDIT_LANDLOCK_ACCESS record.
func parseAccess(text []byte) (accessRecord, bool) {
	f := parseFields(text)
	id, ok := parseDomain(f["domain"])
	if !ok || f["blockers"] == "" {
		return accessRecord{}, false
	}
	r := accessRecord{domain: id, blockers: strings.Split(f["blockers"], ","), fields: f}
	delete(f, "domain")
	delete(f, "blockers")
	return r, true
}

// parseDomain parses the text of an AUDIT_LANDLOCK_DOMAIN record.
func parseDomainRecord(text []byte) (domainRecord, bool) {
	f := parseFields(text)
	id, ok := parseDomain(f["domain"])
	if !ok {
		return domainRecord{}, false
	}
	switch f["status"] {
	case "allocated":
		pid, err := strconv.Atoi(f["pid"])
		if err != nil || pid <= 0 {
			return domainRecord{}, false
		}
		return domainRecord{domain: id, allocated: true, pid: pid}, true
	case "deallocated":
		n, err := strconv.ParseUint(f["denials"], 10, 64)
		if err != nil {
			return domainRecord{}, false
		}
		return domainRecord{domain: id, denials: n}, true
	}
	return domainRecord{}, false
}

// parseDomain parses a domain id, which the kernel prints as %llx and
// never as 0.
func parseDomain(s string) (uint64, bool) {
	id, err := strconv.ParseUint(s, 16, 64)
	return id, err == nil && id != 0
}

// untrusted lists the fields the kernel writes with
// audit_log_untrustedstring(): quoted when printable, otherwise hex.
var untrusted = map[string]bool{
	"path": true, "name": true, "exe": true, "comm": true, "ocomm": true, "dev": true,
}

// parseFields splits the text of one record into key=value fields. It
// skips the "audit(<time>:<serial>): " prefix that records read from
// netlink carry, strips quotes and decodes hex-encoded untrusted strings.
// A value never contains a space: the kernel hex-encodes untrusted strings
// that do, and quoted values hold no space or quote.
func parseFields(text []byte) map[string]string {
	if i := bytes.IndexByte(text, 0); i >= 0 {
		text = text[:i]
	}
	s := string(text)
	if strings.HasPrefix(s, "audit(") {
		if i := strings.Index(s, "): "); i >= 0 {
			s = s[i+3:]
		}
	}
	f := make(map[string]string)
	for _, kv := range strings.Fields(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if _, dup := f[k]; dup {
			continue // the first occurrence is Landlock's own field
		}
		f[k] = fieldValue(k, v)
	}
	return f
}

// fieldValue undoes audit_log_untrustedstring(): "text" when every byte
// is printable and not a quote, otherwise uppercase hex of the bytes.
func fieldValue(key, v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1]
	}
	if untrusted[key] && len(v)%2 == 0 {
		if b, err := hex.DecodeString(v); err == nil {
			return string(b)
		}
	}
	return v
}
