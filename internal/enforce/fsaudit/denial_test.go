package fsaudit

import (
	"reflect"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

const (
	execHint    = "files in fs_read, fs_write and /tmp are not executable: run a script through an allowed interpreter (sh FILE, python3 FILE)"
	connectHint = "connect through the egress proxy that HTTP_PROXY, HTTPS_PROXY and ALL_PROXY name, which admits the net_hosts of the policy"
)

func TestDenialOf(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Denial
	}{
		{"read", `domain=1 blockers=fs.read_file path="/root/.aws/credentials" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "read", Target: "/root/.aws/credentials", Rule: "fs_read",
				Message: `"/root/.aws/credentials" is outside fs_read`}},
		{"list", `domain=1 blockers=fs.read_dir path="/home" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "list", Target: "/home", Rule: "fs_read",
				Message: `"/home" is outside fs_read`}},
		{"read-write-is-write", `domain=1 blockers=fs.write_file,fs.read_file path="/etc/hosts" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "write", Target: "/etc/hosts", Rule: "fs_write",
				Message: `"/etc/hosts" is outside fs_write`}},
		{"create-names-dir", `domain=1 blockers=fs.make_reg path="/data" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "create", Target: "/data", Rule: "fs_write",
				Message: `"/data" is outside fs_write`}},
		{"remove", `domain=1 blockers=fs.remove_file path="/data" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "remove", Target: "/data", Rule: "fs_write",
				Message: `"/data" is outside fs_write`}},
		{"truncate", `domain=1 blockers=fs.truncate path="/data/f" dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "truncate", Target: "/data/f", Rule: "fs_write",
				Message: `"/data/f" is outside fs_write`}},
		{"exec-with-read", `domain=1 blockers=fs.execute,fs.read_file path="/usr/bin/curl" dev="vda" ino=3`,
			Denial{Layer: "exec", Op: "exec", Target: "/usr/bin/curl", Rule: "allowed_tools",
				Message: `"/usr/bin/curl" is not in allowed_tools`, Hint: execHint}},
		{"exec-git-helper", `domain=1 blockers=fs.execute,fs.read_file path="/usr/lib/git-core/git" dev="vda" ino=3`,
			Denial{Layer: "exec", Op: "exec", Target: "/usr/lib/git-core/git", Rule: "allowed_tools",
				Message: `"/usr/lib/git-core/git" is not in allowed_tools`,
				Hint:    "git runs its helpers from /usr/lib/git-core: a clone over HTTP(S) needs /usr/lib/git-core/git and /usr/lib/git-core/git-remote-http in allowed_tools besides git"}},
		{"hex-path", `domain=1 blockers=fs.read_file path=2F612062 dev="vda" ino=3`,
			Denial{Layer: "fs", Op: "read", Target: "/a b", Rule: "fs_read",
				Message: `"/a b" is outside fs_read`}},
		{"mknod-never", `domain=1 blockers=fs.make_char path="/tmp" dev="tmpfs" ino=3`,
			Denial{Layer: "fs", Op: "mknod", Target: "/tmp", Message: `mknod "/tmp" refused: the sandbox never allows it`}},
		{"connect", `domain=1 blockers=net.connect_tcp daddr=10.0.0.1 dest=443`,
			Denial{Layer: "net", Op: "connect", Target: "10.0.0.1:443", Rule: "net_hosts",
				Message: `direct TCP connection to "10.0.0.1:443" refused: the only way out is the egress proxy`,
				Hint:    connectHint}},
		{"connect-v6", `domain=1 blockers=net.connect_tcp daddr=::1 dest=22`,
			Denial{Layer: "net", Op: "connect", Target: "[::1]:22", Rule: "net_hosts",
				Message: `direct TCP connection to "[::1]:22" refused: the only way out is the egress proxy`,
				Hint:    connectHint}},
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

// TestDenialGrant: only host paths the sandbox sees at the same place get
// a grant to suggest; the sandbox's own trees, direct connections and
// operations no grant allows get none.
func TestDenialGrant(t *testing.T) {
	tests := []struct {
		name string
		d    Denial
		want policy.Capability
		ok   bool
	}{
		{"read", Denial{Rule: "fs_read", Target: "/home/u/.aws"}, policy.FSRead, true},
		{"write-dir", Denial{Rule: "fs_write", Target: "/data"}, policy.FSWrite, true},
		{"exec", Denial{Rule: "allowed_tools", Target: "/data/run.sh"}, policy.AllowedTools, true},
		{"root", Denial{Rule: "fs_read", Target: "/"}, policy.FSRead, true}, // the policy refuses "/" itself
		{"tmp", Denial{Rule: "allowed_tools", Target: "/tmp/x.sh"}, 0, false},
		{"dev", Denial{Rule: "fs_write", Target: "/dev/shm"}, 0, false},
		{"proc", Denial{Rule: "fs_read", Target: "/proc/1/environ"}, 0, false},
		{"etc", Denial{Rule: "fs_write", Target: "/etc/passwd"}, 0, false},
		{"etc-prefix-not-child", Denial{Rule: "fs_read", Target: "/etcetera"}, policy.FSRead, true},
		{"relative", Denial{Rule: "fs_read", Target: "x"}, 0, false},
		{"connect", Denial{Rule: "net_hosts", Target: "10.0.0.1:443"}, 0, false},
		{"never", Denial{Rule: "", Target: "/tmp"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.d.Grant()
			if got != tt.want || ok != tt.ok {
				t.Errorf("%+v.Grant() = %v, %v, want %v, %v", tt.d, got, ok, tt.want, tt.ok)
			}
		})
	}
}
