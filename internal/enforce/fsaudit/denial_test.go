package fsaudit

import (
	"reflect"
	"testing"
)

func TestDenialOf(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Denial
	}{
		{"read", `domain=1 blockers=fs.read_file path="/root/.aws/credentials" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "read", Target: "/root/.aws/credentials", Rule: "fs_read",
				Message: `"/root/.aws/credentials" is outside fs_read`, Suggestion: `add "/root/.aws/credentials" to fs_read`}},
		{"list", `domain=1 blockers=fs.read_dir path="/home" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "list", Target: "/home", Rule: "fs_read",
				Message: `"/home" is outside fs_read`, Suggestion: `add "/home" to fs_read`}},
		{"read-write-is-write", `domain=1 blockers=fs.write_file,fs.read_file path="/etc/hosts" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "write", Target: "/etc/hosts", Rule: "fs_write",
				Message: `"/etc/hosts" is outside fs_write`, Suggestion: `add "/etc/hosts" to fs_write`}},
		{"create-names-dir", `domain=1 blockers=fs.make_reg path="/data" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "create", Target: "/data", Rule: "fs_write",
				Message: `"/data" is outside fs_write`, Suggestion: `add "/data" to fs_write`}},
		{"remove", `domain=1 blockers=fs.remove_file path="/data" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "remove", Target: "/data", Rule: "fs_write",
				Message: `"/data" is outside fs_write`, Suggestion: `add "/data" to fs_write`}},
		{"truncate", `domain=1 blockers=fs.truncate path="/data/f" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "truncate", Target: "/data/f", Rule: "fs_write",
				Message: `"/data/f" is outside fs_write`, Suggestion: `add "/data/f" to fs_write`}},
		{"exec-with-read", `domain=1 blockers=fs.execute,fs.read_file path="/usr/bin/curl" dev="vda" ino=3`,
			Denial{Layer: "exec", Op: "exec", Target: "/usr/bin/curl", Rule: "allowed_tools",
				Message: `"/usr/bin/curl" is not in allowed_tools`, Suggestion: `add "/usr/bin/curl" to allowed_tools`}},
		{"hex-path", `domain=1 blockers=fs.read_file path=2F612062 dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "read", Target: "/a b", Rule: "fs_read",
				Message: `"/a b" is outside fs_read`, Suggestion: `add "/a b" to fs_read`}},
		{"mknod-never", `domain=1 blockers=fs.make_char path="/tmp" dev="tmpfs" ino=3`,
			Denial{Layer: "fs", Op: "mknod", Target: "/tmp", Message: `mknod "/tmp" refused: the sandbox never allows it`}},
		{"connect", `domain=1 blockers=net.connect_tcp daddr=10.0.0.1 dest=443`,
			Denial{Layer: "net", Op: "connect", Target: "10.0.0.1:443", Rule: "net_hosts",
				Message:    `direct TCP connection to "10.0.0.1:443" refused: the only way out is the egress proxy`,
				Suggestion: "add the host to net_hosts and connect through HTTP_PROXY or ALL_PROXY"}},
		{"connect-v6", `domain=1 blockers=net.connect_tcp daddr=::1 dest=22`,
			Denial{Layer: "net", Op: "connect", Target: "[::1]:22", Rule: "net_hosts",
				Message:    `direct TCP connection to "[::1]:22" refused: the only way out is the egress proxy`,
				Suggestion: "add the host to net_hosts and connect through HTTP_PROXY or ALL_PROXY"}},
		{"bind-never", `domain=1 blockers=net.bind_tcp src=8080`,
			Denial{Layer: "net", Op: "bind", Target: "port 8080", Message: `bind "port 8080" refused: the sandbox never allows it`}},
		{"signal", `domain=1 blockers=scope.signal opid=1234 ocomm="sshd"`,
			Denial{Layer: "kernel", Op: "signal", Target: "pid 1234 (sshd)", Message: `signal "pid 1234 (sshd)" refused: the sandbox never allows it`}},
		{"ptrace-no-target", `domain=1 blockers=ptrace`,
			Denial{Layer: "kernel", Op: "ptrace", Message: "ptrace refused: the sandbox never allows it"}},
		{"unknown-blocker", `domain=1 blockers=fs.future path="/x"`,
			Denial{Layer: "kernel", Op: "fs.future", Target: "/x", Message: `fs.future "/x" refused: the sandbox never allows it`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := parseAccess([]byte(tt.text))
			if !ok {
				t.Fatalf("parseAccess(%q) failed", tt.text)
			}
			got := denialOf(r)
			tt.want.Blockers, tt.want.Count = r.blockers, 1
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("denialOf(%q) =\n%+v, want\n%+v", tt.text, got, tt.want)
			}
		})
	}
}
