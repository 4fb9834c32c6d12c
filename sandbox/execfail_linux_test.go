package sandbox

import (
	"testing"

	"github.com/airlock-sandbox/airlock/plan"
)

func TestShebang(t *testing.T) {
	tests := []struct {
		name, head, interp, arg string
		ok                      bool
	}{
		{"plain", "#!/usr/bin/python3\nprint(1)\n", "/usr/bin/python3", "", true},
		{"arg", "#!/bin/sh -e\n", "/bin/sh", "-e", true},
		{"spaces", "#!  /usr/bin/env   python3 -u \n", "/usr/bin/env", "python3 -u", true},
		{"tab", "#!/bin/sh\t-x\n", "/bin/sh", "-x", true},
		{"no-newline", "#!/bin/sh", "/bin/sh", "", true},
		{"empty", "#!\n", "", "", true},
		{"not-a-script", "\x7fELF...", "", "", false},
		{"bom-is-not-a-shebang", "\ufeff#!/bin/sh\n", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			interp, arg, ok := shebang([]byte(tt.head))
			if interp != tt.interp || arg != tt.arg || ok != tt.ok {
				t.Errorf("shebang(%q) = %q, %q, %v, want %q, %q, %v", tt.head, interp, arg, ok, tt.interp, tt.arg, tt.ok)
			}
		})
	}
}

func TestEnvProgram(t *testing.T) {
	tests := []struct {
		name, interp, arg, want string
	}{
		{"plain", "/usr/bin/env", "python3", "python3"},
		{"split", "/usr/bin/env", "-S python3 -u", "python3"},
		{"assignment", "/usr/bin/env", "-S LC_ALL=C python3", "python3"},
		{"other-option", "/usr/bin/env", "-i python3", ""},
		{"not-env", "/usr/bin/python3", "-u", ""},
		{"nothing", "/usr/bin/env", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := envProgram(tt.interp, tt.arg); got != tt.want {
				t.Errorf("envProgram(%q, %q) = %q, want %q", tt.interp, tt.arg, got, tt.want)
			}
		})
	}
}

// TestRunnableInside resolves paths through a plan's symlinks and tool
// binds, as the sandbox's kernel would, without touching the host.
func TestRunnableInside(t *testing.T) {
	pl := &plan.Plan{Mounts: []plan.Mount{
		{Kind: plan.KindSymlink, Source: "usr/bin", Target: "/bin", Origin: plan.OriginBase},
		{Kind: plan.KindSymlink, Source: "/usr/lib", Target: "/lib", Origin: plan.OriginBase},
		{Kind: plan.KindBind, Source: "/usr/bin/dash", Target: "/usr/bin/sh", Exec: true, Origin: plan.OriginTool},
		{Kind: plan.KindBind, Source: "/data", Target: "/data", Origin: plan.OriginFSRead},
		{Kind: plan.KindBind, Source: "/opt/x/run", Target: "/opt/x/run", Exec: true, Origin: plan.OriginCommand},
	}}
	tests := []struct {
		path   string
		loader bool
		want   bool
	}{
		{"/usr/bin/sh", false, true},
		{"/bin/sh", false, true},
		{"/bin/../bin/sh", false, true},
		{"/usr/bin/python3", false, false},
		{"/opt/x/run", false, true},
		{"/data", false, false}, // noexec, and not a tool
		{"/nowhere/ld.so", true, false},
	}
	for _, tt := range tests {
		if got := runnableInside(pl, tt.path, tt.loader); got != tt.want {
			t.Errorf("runnableInside(%q, loader %v) = %v, want %v", tt.path, tt.loader, got, tt.want)
		}
	}
}
