package landlock

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

const (
	abi1FS = 0x1fff // EXECUTE … MAKE_SYM
	abi2FS = abi1FS | fsRefer
	abi3FS = abi2FS | fsTruncate
	abi5FS = abi3FS | fsIoctlDev

	dirWrite = fsWriteFile | fsRemoveDir | fsRemoveFile | fsMakeDir | fsMakeReg |
		fsMakeSym | fsMakeFifo | fsMakeSock | fsTruncate | fsRefer
)

func TestCompileMasks(t *testing.T) {
	full := Config{RestrictBind: true, ScopeSignals: true, ScopeAbstractUnix: true, LogNewExec: true}
	tests := []struct {
		name    string
		cfg     Config
		abi     int
		wantABI int
		fs, net uint64
		scoped  uint64
		flags   uint32
	}{
		{"abi1", full, 1, 1, abi1FS, 0, 0, 0},
		{"abi2", full, 2, 2, abi2FS, 0, 0, 0},
		{"abi3", full, 3, 3, abi3FS, 0, 0, 0},
		{"abi4", full, 4, 4, abi3FS, netConnectTCP | netBindTCP, 0, 0},
		{"abi5", full, 5, 5, abi5FS, netConnectTCP | netBindTCP, 0, 0},
		{"abi6", full, 6, 6, abi5FS, netConnectTCP | netBindTCP, scopeSignal | scopeAbstractUnix, 0},
		{"abi7", full, 7, 7, abi5FS, netConnectTCP | netBindTCP, scopeSignal | scopeAbstractUnix, restrictLogNewExecOn},
		{"abi9-clamped", full, 9, 7, abi5FS, netConnectTCP | netBindTCP, scopeSignal | scopeAbstractUnix, restrictLogNewExecOn},
		{"zero-config-abi7", Config{}, 7, 7, abi5FS, netConnectTCP, 0, 0},
		{"signals-only", Config{ScopeSignals: true}, 6, 6, abi5FS, netConnectTCP, scopeSignal, 0},
		{"unix-only", Config{ScopeAbstractUnix: true}, 7, 7, abi5FS, netConnectTCP, scopeAbstractUnix, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Compile(tt.cfg, tt.abi)
			if err != nil {
				t.Fatalf("Compile(%+v, %d): %v", tt.cfg, tt.abi, err)
			}
			if rs.ABI != tt.wantABI || rs.HandledFS != tt.fs || rs.HandledNet != tt.net || rs.Scoped != tt.scoped || rs.Flags != tt.flags {
				t.Errorf("Compile(%+v, %d) = abi %d fs %#x net %#x scoped %#x flags %#x, want abi %d fs %#x net %#x scoped %#x flags %#x",
					tt.cfg, tt.abi, rs.ABI, rs.HandledFS, rs.HandledNet, rs.Scoped, rs.Flags,
					tt.wantABI, tt.fs, tt.net, tt.scoped, tt.flags)
			}
			if rs.HandledFS&(fsMakeChar|fsMakeBlock) != fsMakeChar|fsMakeBlock {
				t.Errorf("HandledFS %#x does not handle MAKE_CHAR|MAKE_BLOCK", rs.HandledFS)
			}
		})
	}
}

func TestPathAccess(t *testing.T) {
	tests := []struct {
		name   string
		access Access
		kind   Kind
		abi    int
		want   uint64
	}{
		{"read-dir", Read, Dir, 7, fsReadFile | fsReadDir},
		{"read-file", Read, File, 7, fsReadFile},
		{"read-device", Read, Device, 7, fsReadFile},
		{"write-dir", Write, Dir, 7, dirWrite},
		{"write-dir-abi1", Write, Dir, 1, dirWrite &^ (fsRefer | fsTruncate)},
		{"write-dir-abi2", Write, Dir, 2, dirWrite &^ fsTruncate},
		{"write-file", Write, File, 7, fsWriteFile | fsTruncate},
		{"write-file-abi2", Write, File, 2, fsWriteFile},
		{"write-device", Write, Device, 7, fsWriteFile | fsTruncate | fsIoctlDev},
		{"write-device-abi4", Write, Device, 4, fsWriteFile | fsTruncate},
		{"exec-file", Execute, File, 7, fsExecute},
		{"exec-dir", Execute, Dir, 7, fsExecute},
		{"read-exec-file", Read | Execute, File, 7, fsReadFile | fsExecute},
		{"all-dir", Read | Write | Execute, Dir, 7, fsReadFile | fsReadDir | dirWrite | fsExecute},
		{"all-file", Read | Write | Execute, File, 7, fsReadFile | fsWriteFile | fsTruncate | fsExecute},
		{"null-device", Read | Write, Device, 5, fsReadFile | fsWriteFile | fsTruncate | fsIoctlDev},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Compile(Config{}, tt.abi)
			if err != nil {
				t.Fatal(err)
			}
			got := rs.PathAccess(tt.access, tt.kind)
			if got != tt.want {
				t.Errorf("PathAccess(%v, %d) at ABI %d = %#x, want %#x", tt.access, tt.kind, tt.abi, got, tt.want)
			}
			if tt.kind != Dir && got&^fsFileRights != 0 {
				t.Errorf("PathAccess(%v, %d) = %#x has directory-only rights %#x", tt.access, tt.kind, got, got&^fsFileRights)
			}
			if got&(fsMakeChar|fsMakeBlock) != 0 {
				t.Errorf("PathAccess(%v, %d) = %#x grants device creation", tt.access, tt.kind, got)
			}
			if tt.kind == Dir && got&fsIoctlDev != 0 {
				t.Errorf("PathAccess(%v, Dir) = %#x grants IOCTL_DEV on a directory", tt.access, got)
			}
		})
	}
}

func TestDropped(t *testing.T) {
	full := Config{RestrictBind: true, ScopeSignals: true, ScopeAbstractUnix: true, LogNewExec: true}
	tests := []struct {
		name string
		cfg  Config
		abi  int
		want []string
	}{
		{"abi1", full, 1, []string{"fs.truncate (needs ABI 3)", "fs.ioctl_dev (needs ABI 5)", "net.connect_tcp (needs ABI 4)",
			"net.bind_tcp (needs ABI 4)", "scope.signal (needs ABI 6)", "scope.abstract_unix_socket (needs ABI 6)", "log.new_exec (needs ABI 7)"}},
		{"abi3", full, 3, []string{"fs.ioctl_dev (needs ABI 5)", "net.connect_tcp (needs ABI 4)",
			"net.bind_tcp (needs ABI 4)", "scope.signal (needs ABI 6)", "scope.abstract_unix_socket (needs ABI 6)", "log.new_exec (needs ABI 7)"}},
		{"abi4", full, 4, []string{"fs.ioctl_dev (needs ABI 5)", "scope.signal (needs ABI 6)",
			"scope.abstract_unix_socket (needs ABI 6)", "log.new_exec (needs ABI 7)"}},
		{"abi5", full, 5, []string{"scope.signal (needs ABI 6)", "scope.abstract_unix_socket (needs ABI 6)", "log.new_exec (needs ABI 7)"}},
		{"abi6", full, 6, []string{"log.new_exec (needs ABI 7)"}},
		{"abi7", full, 7, nil},
		{"abi3-zero-config", Config{}, 3, []string{"fs.ioctl_dev (needs ABI 5)", "net.connect_tcp (needs ABI 4)"}},
		{"abi5-zero-config", Config{}, 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Compile(tt.cfg, tt.abi)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rs.Dropped, tt.want) {
				t.Errorf("Compile(%+v, %d).Dropped = %q, want %q", tt.cfg, tt.abi, rs.Dropped, tt.want)
			}
			if st := rs.status(true); !slices.Equal(st.Dropped, tt.want) {
				t.Errorf("status().Dropped = %q, want %q", st.Dropped, tt.want)
			}
		})
	}
}

func TestPorts(t *testing.T) {
	cfg := Config{ConnectTCP: []uint16{3128, 1080, 3128}, RestrictBind: true, BindTCP: []uint16{0, 1080}}
	tests := []struct {
		name string
		abi  int
		want []PortRule
	}{
		{"abi3-none", 3, nil},
		{"abi4", 4, []PortRule{{0, netBindTCP}, {1080, netConnectTCP | netBindTCP}, {3128, netConnectTCP}}},
		{"abi7", 7, []PortRule{{0, netBindTCP}, {1080, netConnectTCP | netBindTCP}, {3128, netConnectTCP}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Compile(cfg, tt.abi)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rs.Ports, tt.want) {
				t.Errorf("Compile(%+v, %d).Ports = %v, want %v", cfg, tt.abi, rs.Ports, tt.want)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		abi  int
		want string
	}{
		{"abi3", Config{ScopeSignals: true}, 3, "abi=3 fs=true net=false scopes=false"},
		{"abi4", Config{ScopeSignals: true}, 4, "abi=4 fs=true net=true scopes=false"},
		{"abi6-no-scope", Config{}, 6, "abi=6 fs=true net=true scopes=false"},
		{"abi6-scope", Config{ScopeSignals: true}, 6, "abi=6 fs=true net=true scopes=true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Compile(tt.cfg, tt.abi)
			if err != nil {
				t.Fatal(err)
			}
			st := rs.status(true)
			if got := fmt.Sprintf("abi=%d fs=%v net=%v scopes=%v", st.ABI, st.FS, st.Net, st.Scopes); got != tt.want {
				t.Errorf("status() = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestCompilePaths(t *testing.T) {
	cfg := Config{Paths: []PathRule{{"/data", Read}, {"/out", Read | Write}}, SelfTestPath: "/etc"}
	rs, err := Compile(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rs.Paths, cfg.Paths) || rs.SelfTestPath != "/etc" {
		t.Errorf("Compile(%+v) = paths %v self-test %q, want %v and /etc", cfg, rs.Paths, rs.SelfTestPath, cfg.Paths)
	}
	cfg.Paths[0].Access = Write
	if rs.Paths[0].Access != Read {
		t.Errorf("Ruleset.Paths aliases Config.Paths")
	}
	if rs, err := Compile(Config{}, 7); err != nil || rs.SelfTestPath != "/" {
		t.Errorf("Compile(Config{}).SelfTestPath = %q, %v, want /", rs.SelfTestPath, err)
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		abi     int
		wantABI bool // errors.Is(err, ErrABI)
	}{
		{"no-landlock", Config{}, 0, true},
		{"min-abi-above-kernel", Config{MinABI: 5}, 4, true},
		{"min-abi-unknown", Config{MinABI: MaxABI + 1}, MaxABI + 2, false},
		{"empty-path", Config{Paths: []PathRule{{"", Read}}}, 7, false},
		{"relative-path", Config{Paths: []PathRule{{"data", Read}}}, 7, false},
		{"unclean-path", Config{Paths: []PathRule{{"/data/../etc", Read}}}, 7, false},
		{"trailing-slash", Config{Paths: []PathRule{{"/data/", Read}}}, 7, false},
		{"zero-access", Config{Paths: []PathRule{{"/data", 0}}}, 7, false},
		{"unknown-access", Config{Paths: []PathRule{{"/data", Read | 1<<5}}}, 7, false},
		{"connect-port-0", Config{ConnectTCP: []uint16{0}}, 7, false},
		{"bind-without-restrict", Config{BindTCP: []uint16{80}}, 7, false},
		{"bind-without-restrict-old-abi", Config{BindTCP: []uint16{80}}, 3, false},
		{"selftest-root-readable", Config{Paths: []PathRule{{"/", Read}}}, 7, false},
		{"selftest-under-read", Config{Paths: []PathRule{{"/data", Read}}, SelfTestPath: "/data/x"}, 7, false},
		{"selftest-relative", Config{SelfTestPath: "etc"}, 7, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Compile(tt.cfg, tt.abi)
			if err == nil {
				t.Fatalf("Compile(%+v, %d) = %+v, want an error", tt.cfg, tt.abi, rs)
			}
			if got := errors.Is(err, ErrABI); got != tt.wantABI {
				t.Errorf("errors.Is(%v, ErrABI) = %v, want %v", err, got, tt.wantABI)
			}
			if tt.wantABI && !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("errors.Is(%v, errors.ErrUnsupported) = false, want true", err)
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"selftest-beside-read", Config{Paths: []PathRule{{"/data", Read}}, SelfTestPath: "/database"}},
		{"selftest-under-write-only", Config{Paths: []PathRule{{"/", Write}}}},
		{"bind-port-0", Config{RestrictBind: true, BindTCP: []uint16{0}}},
		{"restrict-bind-nil", Config{RestrictBind: true}},
		{"min-abi-equal", Config{MinABI: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Compile(tt.cfg, 7); err != nil {
				t.Errorf("Compile(%+v, 7): %v", tt.cfg, err)
			}
		})
	}
}

func TestAccessString(t *testing.T) {
	tests := []struct {
		name string
		a    Access
		want string
	}{
		{"none", 0, "none"},
		{"read", Read, "read"},
		{"all", Read | Write | Execute, "read|write|execute"},
		{"unknown", Write | 1<<6, "write|0x40"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.String(); got != tt.want {
				t.Errorf("Access(%#x).String() = %q, want %q", uint8(tt.a), got, tt.want)
			}
		})
	}
}
