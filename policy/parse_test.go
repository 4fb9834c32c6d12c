package policy_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// firstError parses in and returns the first *ParseError, failing t when
// the input parses.
func firstError(t *testing.T, in string, opts policy.ParseOptions) *policy.ParseError {
	t.Helper()
	p, err := policy.Parse([]byte(in), opts)
	if err == nil {
		t.Fatalf("Parse(%q) = %s, want an error", in, p.Summary())
	}
	var pe *policy.ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("Parse(%q) error %v (%T) is not a *ParseError", in, err, err)
	}
	if p != nil {
		t.Errorf("Parse(%q) returned a policy with an error", in)
	}
	return pe
}

// TestParseErrors covers each class of error with its position. The
// position is that of the offending node, so a user can jump to it.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		line, col int    // line -1: any line (yaml's own syntax errors carry an approximate line)
		want      string // part of the message
	}{
		// Structure.
		{"empty-input", "", 1, 1, "policy is empty"},
		{"only-comments", "# nothing\n", 1, 1, "policy is empty"},
		{"top-level-list", "- version\n", 1, 1, "got a list"},
		{"top-level-scalar", "hello\n", 1, 1, "got the string"},
		{"missing-version", "fs_read: [/a]\n", 1, 1, "version is missing"},
		{"version-2", "version: 2\n", 1, 10, "unsupported version 2"},
		{"version-string", "version: \"1\"\n", 1, 10, "must be the number 1"},
		{"version-float", "version: 1.0\n", 1, 10, "must be the number 1"},
		{"unknown-key", "version: 1\nfs_raed: [/a]\n", 2, 1, `unknown key "fs_raed": did you mean "fs_read"`},
		{"unknown-key-dash", "version: 1\nfs-write: [/a]\n", 2, 1, `did you mean "fs_write"`},
		{"unknown-key-far", "version: 1\ncolour: red\n", 2, 1, `unknown key "colour"`},
		{"unknown-budget-key", "version: 1\nbudget:\n  max_wal: 30s\n", 3, 3, `unknown key "max_wal" in budget: did you mean "max_wall"`},
		{"budget-key-at-top", "version: 1\nmax_wall: 30s\n", 2, 1, "belongs under budget"},
		{"non-string-key", "version: 1\n7: x\n", 2, 1, "keys are plain names"},
		{"duplicate-key", "version: 1\nfs_read: [/a]\nfs_read: [/b]\n", 3, 1, `duplicate key "fs_read" (first at 2:1)`},
		{"duplicate-version", "version: 1\nversion: 1\n", 2, 1, "duplicate key"},
		{"duplicate-budget-key", "version: 1\nbudget:\n  max_ops: 1\n  max_ops: 2\n", 4, 3, "duplicate key"},
		{"scalar-for-list", "version: 1\nfs_read: /a\n", 2, 10, "must be a list, got the string \"/a\": write [/a]"},
		{"mapping-for-list", "version: 1\nnet_hosts: {a: b}\n", 2, 12, "must be a list, got a mapping"},
		{"list-in-list", "version: 1\nfs_read: [[/a]]\n", 2, 11, "entries are strings, got a list"},
		{"bool-entry", "version: 1\nallowed_tools: [true]\n", 2, 17, `quote it ("true")`},
		{"number-entry", "version: 1\nallowed_tools: [7]\n", 2, 17, "got the number 7"},
		{"scalar-budget", "version: 1\nbudget: 5\n", 2, 9, "budget must be a mapping"},
		{"list-budget", "version: 1\nbudget: [max_wall]\n", 2, 9, "budget must be a mapping"},
		// Nulls and empty strings.
		{"null-list", "version: 1\nfs_read:\n", 2, 9, "fs_read has no value"},
		{"null-tilde", "version: 1\nfs_write: ~\n", 2, 11, "fs_write has no value"},
		{"null-entry", "version: 1\nfs_read: [null]\n", 2, 11, "got null"},
		{"null-budget-value", "version: 1\nbudget:\n  max_wall:\n", 3, 12, "max_wall has no value"},
		{"empty-string", "version: 1\nfs_read: [\"\"]\n", 2, 11, "is empty"},
		{"empty-env", "version: 1\nenv: ['']\n", 2, 7, "is empty"},
		// Bytes that must not appear.
		{"nul-byte", "version: 1\nfs_read: [/a\x00b]\n", 2, 13, "NUL byte"},
		{"nul-escape", "version: 1\nfs_read: [\"/a\\0b\"]\n", 2, 11, "NUL byte"},
		{"escape-control-raw", "version: 1\nfs_read: [/a\x1b[2J]\n", 2, 13, "control character U+001B"},
		{"escape-control-quoted", "version: 1\nenv: [\"A=\\e[2J\"]\n", 2, 7, "control character U+001B"},
		{"tab-in-value", "version: 1\nenv: [\"A=\\tb\"]\n", 2, 7, "control character U+0009"},
		{"newline-in-value", "version: 1\nenv: [\"A=\\nb\"]\n", 2, 7, "control character U+000A"},
		{"bidi-override", "version: 1\n# comment \u202e hidden\n", 2, 11, "invisible formatting character U+202E"},
		{"bidi-escape", "version: 1\nfs_read: [\"/a\\u202eb\"]\n", 2, 11, "invisible formatting character U+202E"},
		{"line-separator", "version: 1\nfs_read: [\"/a\\u2028\"]\n", 2, 11, "U+2028"},
		{"c1-control", "version: 1\nfs_read: [\"/a\\x85\"]\n", 2, 11, "control character U+0085"},
		{"invalid-utf8", "version: 1\nfs_read: [/a\xff]\n", 2, 13, "invalid UTF-8"},
		{"utf16", "\xff\xfev\x00", 1, 1, "invalid UTF-8"},
		// YAML features a policy never needs.
		{"anchor", "version: 1\nfs_read: &a [/x]\nfs_write: *a\n", 2, 10, "anchor &a is not allowed"},
		{"anchor-on-entry", "version: 1\nfs_read: [&a /x]\n", 2, 11, "anchor &a"},
		{"merge-key", "version: 1\nbudget:\n  <<: {max_wall: 5s}\n", 3, 3, "merge key << is not allowed"},
		{"tag-std", "version: 1\nfs_read: !!seq [/a]\n", 2, 10, "tag !!seq is not allowed"},
		{"tag-custom", "version: 1\nfs_read: [!secret /a]\n", 2, 11, "tag !secret is not allowed"},
		{"tag-on-version", "version: !!int 1\n", 1, 10, "tag !!int"},
		{"tag-on-key", "!!str version: 1\n", 1, 1, "tag !!str"},
		{"two-documents", "version: 1\n---\nversion: 1\n", 2, 1, "second document"},
		{"syntax", "version: 1\nfs_read: [/a\n", -1, 0, "not valid YAML or JSON"},
		{"bad-indent", "version: 1\nbudget:\n  max_wall: 1s\n max_ops: 3\n", -1, 0, "not valid YAML or JSON"},
		// Budgets.
		{"bare-duration", "version: 1\nbudget:\n  max_wall: 30\n", 3, 13, "duration 30 has no unit: write 30s"},
		{"bare-duration-float", "version: 1\nbudget:\n  max_cpu: 1.5\n", 3, 12, "has no unit"},
		{"bad-duration", "version: 1\nbudget:\n  max_wall: 30 s\n", 3, 13, "is not valid"},
		{"duration-sign", "version: 1\nbudget:\n  max_wall: -30s\n", 3, 13, "is not valid"},
		{"duration-micro-sign", "version: 1\nbudget:\n  max_wall: 5µs\n", 3, 13, "is not valid"},
		{"zero-duration", "version: 1\nbudget:\n  max_wall: 0s\n", 3, 13, "max_wall 0s must be positive"},
		{"zero-bare", "version: 1\nbudget:\n  max_wall: 0\n", 3, 13, "has no unit"},
		{"huge-wall", "version: 1\nbudget:\n  max_wall: 25h\n", 3, 13, "above the largest allowed max_wall 24h"},
		{"overflow-duration", "version: 1\nbudget:\n  max_cpu: 9999999999h\n", 3, 12, "too large"},
		{"bool-duration", "version: 1\nbudget:\n  max_cpu: true\n", 3, 12, "must be a duration like 30s"},
		{"list-duration", "version: 1\nbudget:\n  max_cpu: [1s]\n", 3, 12, "must be a duration like 30s, got a list"},
		{"zero-size", "version: 1\nbudget:\n  max_memory: 0\n", 3, 15, "max_memory 0B must be positive"},
		{"negative-size", "version: 1\nbudget:\n  max_memory: -1\n", 3, 15, "does not start with a number"},
		{"size-lower-unit", "version: 1\nbudget:\n  max_memory: 1mb\n", 3, 15, `unknown unit "mb"`},
		{"size-short-unit", "version: 1\nbudget:\n  max_memory: 1M\n", 3, 15, `unknown unit "M"`},
		{"size-space", "version: 1\nbudget:\n  max_memory: 1 MiB\n", 3, 15, `unknown unit " MiB"`},
		{"size-fraction", "version: 1\nbudget:\n  max_memory: 1.5GiB\n", 3, 15, "unknown unit"},
		{"size-hex", "version: 1\nbudget:\n  max_memory: 0x10\n", 3, 15, "unknown unit"},
		{"size-overflow", "version: 1\nbudget:\n  max_memory: 99999999999999999999\n", 3, 15, "too large"},
		{"size-unit-overflow", "version: 1\nbudget:\n  max_scratch: 99999999TiB\n", 3, 16, "too large"},
		{"huge-memory", "version: 1\nbudget:\n  max_memory: 2TiB\n", 3, 15, "above the largest allowed max_memory 1TiB"},
		{"huge-output", "version: 1\nbudget:\n  max_output_bytes: 2GiB\n", 3, 21, "above the largest allowed max_output_bytes 1GiB"},
		{"ops-zero", "version: 1\nbudget:\n  max_ops: 0\n", 3, 12, "max_ops 0 must be positive"},
		{"ops-negative", "version: 1\nbudget:\n  max_ops: -5\n", 3, 12, "must be a whole number"},
		{"ops-float", "version: 1\nbudget:\n  max_ops: 1.5\n", 3, 12, "must be a whole number"},
		{"ops-quoted", "version: 1\nbudget:\n  max_ops: \"10\"\n", 3, 12, "must be a whole number"},
		{"ops-huge", "version: 1\nbudget:\n  max_ops: 1000000001\n", 3, 12, "above the largest allowed max_ops 1000000000"},
		{"ops-overflow", "version: 1\nbudget:\n  max_ops: 99999999999999999999\n", 3, 12, "must be a whole number"},
		{"pids-huge", "version: 1\nbudget:\n  max_pids: 1000001\n", 3, 13, "above the largest allowed max_pids"},
		// Paths.
		{"tilde", "version: 1\nfs_read: [~/data]\n", 2, 11, "~ is not expanded: write the absolute path"},
		{"tilde-user", "version: 1\nfs_write: [\"~root\"]\n", 2, 12, "~ is not expanded"},
		{"root", "version: 1\nfs_read: [/]\n", 2, 11, "/ would grant the whole host"},
		{"root-dotdot", "version: 1\nfs_write: [/data/../..]\n", 2, 12, "/ would grant the whole host"},
		{"root-slashes", "version: 1\nfs_read: [//]\n", 2, 11, "/ would grant the whole host"},
		{"proc", "version: 1\nfs_read: [/proc]\n", 2, 11, "the sandbox mounts its own /proc; /sys is never granted"},
		{"proc-child", "version: 1\nfs_read: [/proc/self/environ]\n", 2, 11, "own /proc"},
		{"proc-dotdot", "version: 1\nfs_read: [/data/../proc/1]\n", 2, 11, "own /proc"},
		{"sys", "version: 1\nfs_write: [/sys/fs/cgroup]\n", 2, 12, "/sys is never granted"},
		{"relative-no-base", "version: 1\nfs_read: [./data]\n", 2, 11, "use an absolute path"},
		// Tools.
		{"tool-relative-path", "version: 1\nallowed_tools: [./bin/x]\n", 2, 17, "neither a tool name"},
		{"tool-space", "version: 1\nallowed_tools: [\"rm -rf\"]\n", 2, 17, "neither a tool name"},
		{"tool-dot", "version: 1\nallowed_tools: [\".\"]\n", 2, 17, "neither a tool name"},
		{"tool-dotdot", "version: 1\nallowed_tools: [\"..\"]\n", 2, 17, "neither a tool name"},
		{"tool-root", "version: 1\nallowed_tools: [/]\n", 2, 17, "/ is a folder, not a tool"},
		{"tool-proc", "version: 1\nallowed_tools: [/proc/self/exe]\n", 2, 17, "own /proc"},
		{"tool-tilde", "version: 1\nallowed_tools: [~/bin/x]\n", 2, 17, "~ is not expanded"},
		// Environment.
		{"env-digit-name", "version: 1\nenv: [1X]\n", 2, 7, "is not a variable name"},
		{"env-dash-name", "version: 1\nenv: [A-B=1]\n", 2, 7, "is not a variable name"},
		{"env-empty-name", "version: 1\nenv: [\"=x\"]\n", 2, 7, "is not a variable name"},
		{"env-http-proxy", "version: 1\nenv: [HTTP_PROXY]\n", 2, 7, "airlock sets HTTP_PROXY itself"},
		{"env-https-proxy-lower", "version: 1\nenv: [https_proxy=http://x]\n", 2, 7, "airlock sets https_proxy itself"},
		{"env-all-proxy-mixed", "version: 1\nenv: [All_Proxy]\n", 2, 7, "airlock sets All_Proxy"},
		{"env-no-proxy", "version: 1\nenv: [NO_PROXY=*]\n", 2, 7, "NO_PROXY extends the hosts reached without the proxy"},
		{"env-no-proxy-passthrough", "version: 1\nenv: [NO_PROXY]\n", 2, 7, "write NO_PROXY=host,host"},
		{"env-http-proxy", "version: 1\nenv: [HTTP_PROXY=http://evil]\n", 2, 7, "airlock sets HTTP_PROXY"},
		{"env-duplicate", "version: 1\nenv: [A, A=1]\n", 2, 10, "A is already listed at 2:7: keep one"},
		// Downgrades.
		{"downgrade-unknown", "version: 1\nallow_downgrade: [landlok]\n", 2, 19, `is not a known downgrade: did you mean "landlock"`},
		{"downgrade-scalar", "version: 1\nallow_downgrade: landlock\n", 2, 18, "must be a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pe := firstError(t, tt.in, policy.ParseOptions{})
			if tt.line == -1 {
				tt.line = pe.Line
			}
			if pe.Line != tt.line || pe.Col != tt.col || !strings.Contains(pe.Msg, tt.want) {
				t.Errorf("Parse(%q) = %d:%d: %s, want %d:%d: ...%s...", tt.in, pe.Line, pe.Col, pe.Msg, tt.line, tt.col, tt.want)
			}
		})
	}
}

// TestParseHostErrors needs the real policy/hostspec.
func TestParseHostErrors(t *testing.T) {
	tests := []struct {
		name, host string
	}{
		{"star", `"*"`},
		{"star-tld", `"*.com"`},
		{"userinfo", `"user@evil.test"`},
		{"url", `"https://api.github.com"`},
		{"port-range-bad", `"api.github.com:0"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := "version: 1\nnet_hosts: [" + tt.host + "]\n"
			pe := firstError(t, in, policy.ParseOptions{})
			if pe.Line != 2 || pe.Col != 13 || !strings.HasPrefix(pe.Msg, "net_hosts entry ") {
				t.Errorf("Parse(%q) = %d:%d: %s, want 2:13: net_hosts entry ...", in, pe.Line, pe.Col, pe.Msg)
			}
		})
	}
}

func TestParseErrorFormat(t *testing.T) {
	tests := []struct {
		name string
		e    policy.ParseError
		want string
	}{
		{"full", policy.ParseError{File: "p.yaml", Line: 3, Col: 5, Msg: "bad"}, "p.yaml:3:5: bad"},
		{"no-file", policy.ParseError{Line: 3, Col: 5, Msg: "bad"}, "3:5: bad"},
		{"no-col", policy.ParseError{File: "p.yaml", Line: 3, Msg: "bad"}, "p.yaml:3: bad"},
		{"no-position", policy.ParseError{File: "p.yaml", Msg: "bad"}, "p.yaml: bad"},
		{"message-only", policy.ParseError{Msg: `fs_read "x": bad`}, `fs_read "x": bad`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.Error(); got != tt.want {
				t.Errorf("(%+v).Error() = %q, want %q", tt.e, got, tt.want)
			}
		})
	}
}

// TestParseAllErrors checks that every problem is reported, in position
// order, each as its own *ParseError carrying the file name.
func TestParseAllErrors(t *testing.T) {
	in := "budget:\n  max_ops: 0\nfs_read: [~/x, /proc]\nenv: [HTTP_PROXY]\nbogus: 1\n"
	_, err := policy.Parse([]byte(in), policy.ParseOptions{File: "p.yaml"})
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Parse(%q) = %v, want a joined error", in, err)
	}
	var got []string
	for _, e := range joined.Unwrap() {
		var pe *policy.ParseError
		if !errors.As(e, &pe) {
			t.Fatalf("error %v (%T) is not a *ParseError", e, e)
		}
		got = append(got, pe.Error()[:strings.Index(pe.Error(), " ")])
	}
	want := []string{"p.yaml:1:1:", "p.yaml:2:12:", "p.yaml:3:11:", "p.yaml:3:16:", "p.yaml:4:7:", "p.yaml:5:1:"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Parse(%q) positions = %v, want %v\n%v", in, got, want, err)
	}
}

func TestParseTooLarge(t *testing.T) {
	in := "version: 1\n#" + strings.Repeat("x", policy.MaxInputSize) + "\n"
	pe := firstError(t, in, policy.ParseOptions{File: "big.yaml"})
	if pe.Line != 0 || !strings.Contains(pe.Msg, "larger than the 1MiB limit") {
		t.Errorf("Parse(%d bytes) = %v, want a size error", len(in), pe)
	}
	// Exactly the limit is fine.
	ok := "version: 1\n#" + strings.Repeat("x", policy.MaxInputSize-13) + "\n"
	if _, err := policy.Parse([]byte(ok), policy.ParseOptions{}); err != nil {
		t.Errorf("Parse(%d bytes) = %v, want nil", len(ok), err)
	}
}

// TestParseAliasBomb checks that a billion-laughs document is refused
// quickly and without expansion.
func TestParseAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 30; i++ {
		prev := "*a" + strconv.Itoa(i-1)
		b.WriteString("a" + strconv.Itoa(i) + ": &a" + strconv.Itoa(i) + " [" + strings.Repeat(prev+", ", 9) + prev + "]\n")
	}
	pe := firstError(t, b.String(), policy.ParseOptions{})
	if pe.Line != 2 || !strings.Contains(pe.Msg, "anchor") && !strings.Contains(pe.Msg, "unknown key") {
		t.Errorf("Parse(alias bomb) = %v, want a refusal at line 2", pe)
	}
}

func TestParseBaseDir(t *testing.T) {
	in := "version: 1\nfs_read: [./data, data/../data/, ../shared, /etc/ssl/certs]\nfs_write: [out, ./out/]\n"
	p, err := policy.Parse([]byte(in), policy.ParseOptions{File: "p.yaml", BaseDir: "/home/u/proj"})
	if err != nil {
		t.Fatalf("Parse(%q) = %v", in, err)
	}
	if got, want := p.FSRead(), []string{"/etc/ssl/certs", "/home/u/proj/data", "/home/u/shared"}; !slices.Equal(got, want) {
		t.Errorf("FSRead() = %q, want %q", got, want)
	}
	if got, want := p.FSWrite(), []string{"/home/u/proj/out"}; !slices.Equal(got, want) {
		t.Errorf("FSWrite() = %q, want %q", got, want)
	}
	if p.Source() != "p.yaml" {
		t.Errorf("Source() = %q, want %q", p.Source(), "p.yaml")
	}
}

func TestParseBaseDirRelative(t *testing.T) {
	pe := firstError(t, "version: 1\n", policy.ParseOptions{BaseDir: "proj"})
	if !strings.Contains(pe.Msg, "not an absolute path") {
		t.Errorf("Parse(BaseDir proj) = %v, want an absolute-path error", pe)
	}
}

func TestParseBaseDirEscape(t *testing.T) {
	// ".." out of the base folder is lexical; the result must still pass
	// the /proc check.
	pe := firstError(t, "version: 1\nfs_read: [../../proc]\n", policy.ParseOptions{BaseDir: "/a/b"})
	if pe.Line != 2 || !strings.Contains(pe.Msg, "own /proc") {
		t.Errorf("Parse(../../proc from /a/b) = %v, want the /proc error", pe)
	}
}
