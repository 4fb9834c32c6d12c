package cgroup

import (
	"io/fs"
	"reflect"
	"strings"
	"testing"
)

const hybridMountinfo = `22 1 0:20 / /sys rw,nosuid - sysfs sysfs rw
30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const hybridCgroup = `9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/abc
2:cpuacct:/
1:cpu:/
0::/
`

// fakeFS serves control files from a map for buildHost.
func fakeFS(files map[string]string, killAtRoot bool) detectEnv {
	return detectEnv{
		readFile: func(name string) ([]byte, error) {
			if s, ok := files[name]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		},
		exists:     func(name string) bool { _, ok := files[name]; return ok },
		killAtRoot: killAtRoot,
	}
}

func TestBuildHost(t *testing.T) {
	tests := []struct {
		name       string
		mountinfo  string
		cgroup     string
		files      map[string]string
		killAtRoot bool
		want       Host
	}{
		{"hybrid-nested-memory", hybridMountinfo, hybridCgroup,
			map[string]string{"/sys/fs/cgroup/unified/cgroup.controllers": "\n"}, true, Host{
				Version: Hybrid,
				Controllers: map[string]string{
					Memory: "/sys/fs/cgroup/memory", Pids: "/sys/fs/cgroup/pids", CPU: "/sys/fs/cgroup/cpu",
					CPUAcct: "/sys/fs/cgroup/cpuacct", Freezer: "/sys/fs/cgroup/freezer",
				},
				Unified: "/sys/fs/cgroup/unified",
				Self: map[string]string{
					"/sys/fs/cgroup/memory": "/sys/fs/cgroup/memory/process_api/abc", "/sys/fs/cgroup/pids": "/sys/fs/cgroup/pids",
					"/sys/fs/cgroup/cpu": "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct": "/sys/fs/cgroup/cpuacct",
					"/sys/fs/cgroup/freezer": "/sys/fs/cgroup/freezer", "/sys/fs/cgroup/unified": "/sys/fs/cgroup/unified",
				},
				KillFile: true,
			}},
		{"pure-v2-delegated",
			"29 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
			"0::/user.slice/user-1000.slice/app.scope\n",
			map[string]string{
				"/sys/fs/cgroup/user.slice/user-1000.slice/app.scope/cgroup.controllers":     "cpu io memory pids\n",
				"/sys/fs/cgroup/user.slice/user-1000.slice/app.scope/cgroup.subtree_control": "memory pids\n",
				"/sys/fs/cgroup/user.slice/user-1000.slice/app.scope/cgroup.kill":            "",
			}, true, Host{
				Version:     V2,
				Controllers: map[string]string{Memory: "/sys/fs/cgroup", Pids: "/sys/fs/cgroup", CPU: "/sys/fs/cgroup"},
				Unified:     "/sys/fs/cgroup",
				Self:        map[string]string{"/sys/fs/cgroup": "/sys/fs/cgroup/user.slice/user-1000.slice/app.scope"},
				KillFile:    true,
				Problems:    []string{"cpu is not enabled in /sys/fs/cgroup/user.slice/user-1000.slice/app.scope/cgroup.subtree_control: Create will try to enable it"},
			}},
		{"v2-root-old-kernel",
			"29 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/\n",
			map[string]string{"/sys/fs/cgroup/cgroup.controllers": "pids\n", "/sys/fs/cgroup/cgroup.subtree_control": "pids\n"},
			false, Host{
				Version:     V2,
				Controllers: map[string]string{Pids: "/sys/fs/cgroup"},
				Unified:     "/sys/fs/cgroup",
				Self:        map[string]string{"/sys/fs/cgroup": "/sys/fs/cgroup"},
			}},
		{"v2-unreadable-controllers-fails-closed",
			"29 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/sup\n", nil, true, Host{
				Version:     V2,
				Controllers: map[string]string{},
				Unified:     "/sys/fs/cgroup",
				Self:        map[string]string{"/sys/fs/cgroup": "/sys/fs/cgroup/sup"},
				Problems:    []string{"cgroup2 at /sys/fs/cgroup: file does not exist: no cgroup2 controller used"},
			}},
		{"cgroupns-bind-root",
			"40 30 0:31 /docker/c1 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n41 30 0:35 /docker/c1 /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids\n",
			"4:memory:/docker/c1/sub\n8:pids:/docker/c1\n", nil, false, Host{
				Version:     V1,
				Controllers: map[string]string{Memory: "/sys/fs/cgroup/memory"},
				Self:        map[string]string{"/sys/fs/cgroup/memory": "/sys/fs/cgroup/memory/sub"},
				Problems:    []string{"pids mounted read-only at /sys/fs/cgroup/pids: not used"},
			}},
		{"outside-namespace",
			"40 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
			"4:memory:/../../other\n", nil, false, Host{
				Controllers: map[string]string{},
				Self:        map[string]string{},
				Problems: []string{
					"memory at /sys/fs/cgroup/memory: own cgroup /../../other lies outside the mounted root /: not used",
					"no cgroup filesystem is mounted",
				},
			}},
		{"escaped-mount-point",
			`40 30 0:31 / /mnt/cg\040mem rw - cgroup cgroup rw,memory` + "\n", "4:memory:/\n", nil, false, Host{
				Version:     V1,
				Controllers: map[string]string{Memory: "/mnt/cg mem"},
				Self:        map[string]string{"/mnt/cg mem": "/mnt/cg mem"},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := buildHost(tt.mountinfo, tt.cgroup, fakeFS(tt.files, tt.killAtRoot))
			if err != nil {
				t.Fatalf("buildHost error: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("buildHost =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestBuildHostMalformed(t *testing.T) {
	tests := []struct{ name, mountinfo, cgroup string }{
		{"mountinfo-no-separator", "40 30 0:31 / /x rw cgroup cgroup rw,memory\n", "0::/\n"},
		{"cgroup-no-colons", hybridMountinfo, "garbage\n"},
		{"cgroup-relative-path", hybridMountinfo, "0::relative\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := buildHost(tt.mountinfo, tt.cgroup, fakeFS(nil, false)); err == nil {
				t.Errorf("buildHost(%q, %q) = nil error, want one", tt.mountinfo, tt.cgroup)
			}
		})
	}
}

func TestParseName(t *testing.T) {
	tests := []struct {
		name, in string
		pid      int
		start    uint64
		ok       bool
	}{
		{"made-by-formatName", formatName(42, 7, [8]byte{1, 2, 3, 4, 5, 6, 7, 0xff}), 42, 7, true},
		{"plain", "airlock-1234-5678-0123456789abcdef", 1234, 5678, true},
		{"foreign", "user.slice", 0, 0, false},
		{"prefix-only", "airlock-", 0, 0, false},
		{"short-random", "airlock-1-2-0123", 0, 0, false},
		{"upper-hex", "airlock-1-2-0123456789ABCDEF", 0, 0, false},
		{"leading-zero-pid", "airlock-01-2-0123456789abcdef", 0, 0, false},
		{"zero-pid", "airlock-0-2-0123456789abcdef", 0, 0, false},
		{"negative", "airlock--1-2-0123456789abcdef", 0, 0, false},
		{"extra-field", "airlock-1-2-3-0123456789abcdef", 0, 0, false},
		{"pid-overflow", "airlock-99999999999-2-0123456789abcdef", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid, start, ok := ParseName(tt.in)
			if pid != tt.pid || start != tt.start || ok != tt.ok {
				t.Errorf("ParseName(%q) = %d, %d, %v, want %d, %d, %v", tt.in, pid, start, ok, tt.pid, tt.start, tt.ok)
			}
		})
	}
}

func TestParseStartTime(t *testing.T) {
	// Fields 4 to 21, then starttime (22) and vsize (23).
	tail := strings.Repeat(" 0", 18) + " 20 12345"
	tests := []struct {
		name, stat string
		want       uint64
		state      byte
		wantErr    bool
	}{
		{"simple", "1 (init) S" + tail, 20, 'S', false},
		{"paren-in-comm", "7 (a) b (c)) Z" + tail, 20, 'Z', false},
		{"too-short", "1 (init) S 0 0", 0, 'S', true},
		{"no-paren", "1 init S" + tail, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStartTime(tt.stat)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("parseStartTime(%q) = %d, %v, want %d, error %v", tt.stat, got, err, tt.want, tt.wantErr)
			}
			if st := procState(tt.stat); st != tt.state {
				t.Errorf("procState(%q) = %q, want %q", tt.stat, st, tt.state)
			}
		})
	}
}

func TestKeyed(t *testing.T) {
	const events = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n"
	tests := []struct {
		name, key string
		want      int64
		ok        bool
	}{
		{"oom_kill", "oom_kill", 2, true},
		{"prefix-not-match", "oom", 1, true},
		{"absent", "populated", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := keyed(events, tt.key)
			if got != tt.want || ok != tt.ok {
				t.Errorf("keyed(events, %q) = %d, %v, want %d, %v", tt.key, got, ok, tt.want, tt.ok)
			}
		})
	}
	if _, err := pidList("procs", "1\n2\nx\n"); err == nil {
		t.Errorf("pidList with garbage = nil error, want one")
	}
}
