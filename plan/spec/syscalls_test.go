package spec

import (
	"encoding/json"
	"testing"
)

func TestSeccompValidate(t *testing.T) {
	allow := []SyscallRule{{Action: ActAllow}}
	tests := []struct {
		name string
		s    Seccomp
	}{
		{"default-allow", Seccomp{Default: ActAllow}},
		{"repeated-name", Seccomp{Default: ActEPERM, Syscalls: []Syscall{{Name: "read", Rules: allow}, {Name: "read", Rules: allow}}}},
		{"empty-name", Seccomp{Default: ActEPERM, Syscalls: []Syscall{{Rules: allow}}}},
		{"no-rules", Seccomp{Default: ActEPERM, Syscalls: []Syscall{{Name: "read"}}}},
		{"zero-mask", Seccomp{Default: ActEPERM, Syscalls: []Syscall{{Name: "read", Rules: []SyscallRule{{Action: ActAllow, Conds: []ArgCond{{Arg: 0}}}}}}}},
		{"value-outside-mask", Seccomp{Default: ActEPERM, Syscalls: []Syscall{{Name: "read", Rules: []SyscallRule{{Action: ActAllow, Conds: []ArgCond{{Arg: 0, Mask: 1, Value: 2}}}}}}}},
		{"arg-index", Seccomp{Default: ActEPERM, Syscalls: []Syscall{{Name: "read", Rules: []SyscallRule{{Action: ActAllow, Conds: []ArgCond{{Arg: 6, Mask: 1}}}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.s.Validate(); err == nil {
				t.Errorf("Validate(%s) = nil, want an error", tt.name)
			}
		})
	}
}

func TestActionText(t *testing.T) {
	for _, a := range []Action{ActAllow, ActKillProcess, ActEPERM, ActENOSYS, 0, 0x7ffc0000} {
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatalf("Marshal(%v) = %v", a, err)
		}
		var got Action
		if err := json.Unmarshal(b, &got); err != nil || got != a {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", b, got, err, a)
		}
	}
	for _, bad := range []string{`"errno(65536)"`, `"errno(x)"`, `"trap"`, `"action(1"`, `1`} {
		var got Action
		if err := json.Unmarshal([]byte(bad), &got); err == nil {
			t.Errorf("Unmarshal(%s) = %v, want an error", bad, got)
		}
	}
}

func TestActionString(t *testing.T) {
	tests := []struct {
		a    Action
		want string
	}{
		{ActAllow, "allow"}, {ActKillProcess, "kill_process"}, {ActEPERM, "errno(1)"},
		{ActENOSYS, "errno(38)"}, {0x7ff00000, "action(0x7ff00000)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.a.String(); got != tt.want {
				t.Errorf("Action(%#x).String() = %q, want %q", uint32(tt.a), got, tt.want)
			}
		})
	}
}
