package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// decideAs answers a syscall the way the profile's rules say (first match
// wins, else the default), as the compiled filter would.
func decideAs(s Seccomp, name string, args [6]uint64) Action {
	for _, sc := range s.Syscalls {
		if sc.Name != name {
			continue
		}
		for _, r := range sc.Rules {
			ok := true
			for _, c := range r.Conds {
				ok = ok && c.Holds(args)
			}
			if ok {
				return r.Action
			}
		}
	}
	return s.Default
}

// TestWithoutNamespacesSeccomp: what a network, IPC and pid namespace used
// to contain is refused by the filter, and connect goes to the supervisor.
func TestWithoutNamespacesSeccomp(t *testing.T) {
	s := WithoutNamespacesSeccomp(DefaultSeccomp())
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	const (
		afUnix, afInet, afInet6, afNetlink, afPacket = 1, 2, 10, 16, 17
		stream, dgram, raw, seqpacket                = 1, 2, 3, 5
		nonblockCloexec                              = 0o4000 | 0o2000000
	)
	cases := []struct {
		name string
		call string
		args [6]uint64
		want Action
	}{
		{"tcp", "socket", [6]uint64{afInet, stream, 0}, ActAllow},
		{"tcp-flags", "socket", [6]uint64{afInet6, stream | nonblockCloexec, 6}, ActAllow},
		{"unix-stream", "socket", [6]uint64{afUnix, stream}, ActAllow},
		{"unix-seqpacket", "socket", [6]uint64{afUnix, seqpacket}, ActAllow},
		{"udp", "socket", [6]uint64{afInet, dgram, 0}, ActEPERM},
		{"udp6", "socket", [6]uint64{afInet6, dgram, 17}, ActEPERM},
		{"icmp", "socket", [6]uint64{afInet, dgram, 1}, ActEPERM},
		{"raw", "socket", [6]uint64{afInet, raw, 1}, ActEPERM},
		{"mptcp", "socket", [6]uint64{afInet, stream, 262}, ActEPERM},
		{"unix-dgram", "socket", [6]uint64{afUnix, dgram}, ActEPERM},
		{"netlink", "socket", [6]uint64{afNetlink, raw}, ActEPERM},
		{"packet", "socket", [6]uint64{afPacket, raw}, ActEPERM},
		{"pair-dgram", "socketpair", [6]uint64{afUnix, dgram}, ActEPERM},
		{"pair-stream", "socketpair", [6]uint64{afUnix, stream}, ActAllow},
		{"connect", "connect", [6]uint64{3, 0x1000, 16}, ActNotify},
		{"listen", "listen", [6]uint64{3, 128}, ActEPERM},
		{"sendto", "sendto", [6]uint64{3, 0x1000, 5, 0}, ActAllow},
		{"sendto-fastopen", "sendto", [6]uint64{3, 0x1000, 5, 0x20000000, 0x2000, 16}, ActEPERM},
		{"sendmsg-fastopen", "sendmsg", [6]uint64{3, 0x1000, 0x20000040}, ActEPERM},
		{"sendmmsg-fastopen", "sendmmsg", [6]uint64{3, 0x1000, 1, 0x20000000}, ActEPERM},
		{"shmget", "shmget", [6]uint64{0, 4096, 0o1000}, ActEPERM},
		{"mq_open", "mq_open", [6]uint64{0x1000, 0}, ActEPERM},
		{"read", "read", [6]uint64{0, 0x1000, 1}, ActAllow},
	}
	for _, c := range cases {
		if got := decideAs(s, c.call, c.args); got != c.want {
			t.Errorf("%s: %s%v = %v, want %v", c.name, c.call, c.args[:3], got, c.want)
		}
	}
	// No syscall it calls refused is allowed by a rule (explain's promise).
	refused := map[string]bool{}
	for _, g := range s.Refused {
		for _, n := range g.Names {
			refused[n] = true
		}
	}
	for _, sc := range s.Syscalls {
		if refused[sc.Name] {
			t.Errorf("%s is listed as refused and still has rules", sc.Name)
		}
	}
	if !refused["listen"] || !refused["shmget"] {
		t.Errorf("refused groups = %+v", s.Refused)
	}
}

// TestWithoutNamespacesPlan: the plan keeps only grants and tools, its
// rules never open /etc, /dev or /tmp wholesale, /tmp becomes the scratch
// folder, and what Landlock cannot express is refused.
func TestWithoutNamespacesPlan(t *testing.T) {
	p := mustPolicyIn(t, policy.Spec{FSRead: []string{"/data"}, FSWrite: []string{"/data/out"}, AllowedTools: []string{"python3"},
		AllowDowngrade: []string{"staged_writes"}})
	pl, err := Compile(p, Request{Argv: []string{"sh"}, CommandIsGranted: true, Cwd: "/tmp/job"}, hostStub{})
	if err != nil {
		t.Fatal(err)
	}
	if err := withoutNamespaces(pl, p, "/tmp/airlock-scratch-1"); err != nil {
		t.Fatal(err)
	}
	if !pl.NoNamespaces || len(pl.Namespaces) != 0 || pl.Cwd != "/tmp/airlock-scratch-1/job" || !pl.RequireLandlock {
		t.Fatalf("plan: no_namespaces %v namespaces %v cwd %q", pl.NoNamespaces, pl.Namespaces, pl.Cwd)
	}
	for _, m := range pl.Mounts {
		if m.Origin == OriginBase || m.Origin == OriginSandbox || m.Kind != KindBind {
			t.Errorf("mount step left in a plan that mounts nothing: %+v", m)
		}
	}
	for _, r := range pl.Rules {
		switch r.Path {
		case "/etc", "/dev", "/tmp", "/":
			t.Errorf("rule opens %s wholesale: %+v", r.Path, r)
		}
	}
	var sawScratch, sawOut bool
	for _, r := range pl.Rules {
		sawScratch = sawScratch || (r.Path == "/tmp/airlock-scratch-1" && r.Access == Read|Write)
		sawOut = sawOut || (r.Path == "/data/out" && r.Access&Write != 0)
	}
	if !sawScratch || !sawOut {
		t.Fatalf("rules lack the scratch folder or the write grant: %+v", pl.Rules)
	}
	for _, e := range pl.Env {
		if e == "HOME=/tmp" || e == "TMPDIR=/tmp" {
			t.Errorf("env %s still names the private /tmp", e)
		}
	}
	if decideAs(pl.Seccomp, "connect", [6]uint64{}) != ActNotify {
		t.Error("connect is not answered by the supervisor")
	}

	for name, spec := range map[string]policy.Spec{
		"fs_deny":    {FSRead: []string{"/data"}, FSDeny: []string{"/data/secret"}},
		"fs_protect": {FSWrite: []string{"/data"}, FSProtect: []string{"/data/keep"}, AllowDowngrade: []string{"staged_writes"}},
		"folder":     {FSWrite: []string{"/data"}},
	} {
		p := mustPolicyIn(t, spec)
		pl, err := Compile(p, Request{Argv: []string{"sh"}, CommandIsGranted: true}, hostStub{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = withoutNamespaces(pl, p, "/tmp/s")
		if !errors.Is(err, ErrNeedsNamespaces) || !strings.Contains(err.Error(), map[string]string{"fs_deny": "fs_deny /data/secret", "fs_protect": "fs_protect /data/keep", "folder": "staged_writes"}[name]) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func mustPolicyIn(t *testing.T, s policy.Spec) *policy.Policy {
	t.Helper()
	p, err := policy.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hostStub is a host with folders /data, /data/out and /usr/lib, and the
// tools sh and python3.
type hostStub struct{}

func (hostStub) Lstat(p string) (bool, bool, string, error) {
	switch p {
	case "/data", "/data/out", "/data/secret", "/data/keep", "/usr/lib":
		return true, true, "", nil
	}
	return false, false, "", nil
}

func (hostStub) LookTool(name string) (string, string, error) {
	switch name {
	case "sh":
		return "/usr/bin/sh", "/usr/bin/dash", nil
	case "python3":
		return "/usr/bin/python3", "/usr/bin/python3.11", nil
	}
	return "", "", errors.New("not found")
}

func (hostStub) Loader() []string          { return []string{"/lib64/ld-linux-x86-64.so.2"} }
func (hostStub) Env(string) (string, bool) { return "", false }
