package fsaudit

import (
	"reflect"
	"testing"
)

func TestParseAccess(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		ok       bool
		domain   uint64
		blockers []string
		fields   map[string]string
	}{
		{"read-quoted-path", `audit(1796019408.283:18): domain=1c5474024 blockers=fs.read_file path="/etc/hostname" dev="vda" ino=611`,
			true, 0x1c5474024, []string{"fs.read_file"}, map[string]string{"path": "/etc/hostname", "dev": "vda", "ino": "611"}},
		{"hex-path-with-space", `audit(1796019408.283:17): domain=1c5474024 blockers=fs.read_file path=2F6574632F70617373207764 dev="vda" ino=1197318`,
			true, 0x1c5474024, []string{"fs.read_file"}, map[string]string{"path": "/etc/pass wd", "dev": "vda", "ino": "1197318"}},
		{"exec-two-blockers", `domain=2a blockers=fs.execute,fs.read_file path="/usr/bin/true" dev="vda" ino=247849`,
			true, 0x2a, []string{"fs.execute", "fs.read_file"}, map[string]string{"path": "/usr/bin/true", "dev": "vda", "ino": "247849"}},
		{"connect", `domain=2a blockers=net.connect_tcp daddr=127.0.0.1 dest=22`,
			true, 0x2a, []string{"net.connect_tcp"}, map[string]string{"daddr": "127.0.0.1", "dest": "22"}},
		{"trailing-nul", "domain=2a blockers=fs.read_dir path=\"/\" dev=\"vda\" ino=2\x00",
			true, 0x2a, []string{"fs.read_dir"}, map[string]string{"path": "/", "dev": "vda", "ino": "2"}},
		{"no-blockers", `domain=2a path="/"`, false, 0, nil, nil},
		{"zero-domain", `domain=0 blockers=fs.read_file path="/"`, false, 0, nil, nil},
		{"bad-domain", `domain=xyz blockers=fs.read_file path="/"`, false, 0, nil, nil},
		{"empty", ``, false, 0, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := parseAccess([]byte(tt.text))
			if ok != tt.ok {
				t.Fatalf("parseAccess(%q) ok = %v, want %v", tt.text, ok, tt.ok)
			}
			if !ok {
				return
			}
			if r.domain != tt.domain || !reflect.DeepEqual(r.blockers, tt.blockers) || !reflect.DeepEqual(r.fields, tt.fields) {
				t.Errorf("parseAccess(%q) = {%x %q %q}, want {%x %q %q}", tt.text, r.domain, r.blockers, r.fields, tt.domain, tt.blockers, tt.fields)
			}
		})
	}
}

func TestParseDomainRecord(t *testing.T) {
	tests := []struct {
		name string
		text string
		ok   bool
		want domainRecord
	}{
		{"allocated", `audit(1796019408.283:17): domain=1c5474024 status=allocated mode=enforcing pid=5340 uid=0 exe="/tmp/proto/llbin" comm="llbin"`,
			true, domainRecord{domain: 0x1c5474024, allocated: true, pid: 5340}},
		{"allocated-hex-exe", `domain=1c status=allocated mode=enforcing pid=7 uid=0 exe=2F612062 comm="a b"`,
			true, domainRecord{domain: 0x1c, allocated: true, pid: 7}},
		{"deallocated", `domain=1c5474024 status=deallocated denials=3`,
			true, domainRecord{domain: 0x1c5474024, denials: 3}},
		{"allocated-no-pid", `domain=1c status=allocated mode=enforcing`, false, domainRecord{}},
		{"deallocated-no-count", `domain=1c status=deallocated`, false, domainRecord{}},
		{"unknown-status", `domain=1c status=renamed`, false, domainRecord{}},
		{"no-domain", `status=allocated pid=3`, false, domainRecord{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseDomainRecord([]byte(tt.text))
			if ok != tt.ok || got != tt.want {
				t.Errorf("parseDomainRecord(%q) = %+v, %v, want %+v, %v", tt.text, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestFieldValue(t *testing.T) {
	tests := []struct {
		name, key, in, want string
	}{
		{"quoted", "path", `"/a/b"`, "/a/b"},
		{"hex-untrusted", "path", "2F6120620A", "/a b\n"},
		{"hex-looking-number", "ino", "1234", "1234"},
		{"odd-hex", "path", "2F6", "2F6"},
		{"not-hex", "path", "<too_long>", "<too_long>"},
		{"lone-quote", "comm", `"`, `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fieldValue(tt.key, tt.in); got != tt.want {
				t.Errorf("fieldValue(%q, %q) = %q, want %q", tt.key, tt.in, got, tt.want)
			}
		})
	}
}
