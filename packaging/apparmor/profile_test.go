// Tests for the AppArmor profile in this folder. The profile is not Go:
// these tests read it as text and check its structure, because CI's
// apparmor_parser (Debian 12, AppArmor 3.0) does not know the userns rule.
// Where an AppArmor 4 parser is installed, it compiles the profile too.
package apparmor_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// installedAt are the paths airlock and airlock-server are installed at
// that the profiles must attach to, and the only ones: each is writable by
// root alone.
var installedAt = []string{"/usr/bin/airlock", "/usr/bin/airlock-server", "/usr/local/bin/airlock", "/usr/local/bin/airlock-server"}

// profile is one profile block of a policy file.
type profile struct {
	name, attach string
	flags        []string
	rules        []string // one per line, comments removed
}

// policyFile is the structure of a policy file, as far as the tests need it.
type policyFile struct {
	preamble []string // statements before the first profile
	profiles []profile
}

var profileHead = regexp.MustCompile(`^profile\s+(\S+)(?:\s+(/\S+))?(?:\s+flags=\(([^)]*)\))?\s*\{$`)

// parsePolicy reads the subset of apparmor.d(5) the profile uses: a
// preamble, then unnested profile blocks. It rejects anything else.
func parsePolicy(src string) (policyFile, error) {
	var f policyFile
	var cur *profile
	for n, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#include") {
			// "#include" is the old include syntax, not a comment.
			return f, errors.New("line " + strconv.Itoa(n+1) + ": old #include syntax; write include")
		}
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.Join(strings.Fields(line), " ")
		switch {
		case line == "":
		case cur == nil && strings.HasPrefix(line, "profile "):
			m := profileHead.FindStringSubmatch(line)
			if m == nil {
				return f, errors.New("line " + strconv.Itoa(n+1) + ": malformed profile header " + strconv.Quote(line))
			}
			p := profile{name: m[1], attach: m[2]}
			for fl := range strings.SplitSeq(m[3], ",") {
				if fl = strings.TrimSpace(fl); fl != "" {
					p.flags = append(p.flags, fl)
				}
			}
			f.profiles = append(f.profiles, p)
			cur = &f.profiles[len(f.profiles)-1]
		case cur == nil && len(f.profiles) > 0:
			return f, errors.New("line " + strconv.Itoa(n+1) + ": preamble statement after a profile: " + strconv.Quote(line))
		case cur == nil:
			f.preamble = append(f.preamble, line)
		case line == "}":
			cur = nil
		case strings.ContainsAny(line, "{}"):
			return f, errors.New("line " + strconv.Itoa(n+1) + ": nested block " + strconv.Quote(line))
		default:
			cur.rules = append(cur.rules, line)
		}
	}
	if cur != nil {
		return f, errors.New("profile " + cur.name + " is not closed")
	}
	return f, nil
}

// expand returns the paths an attachment matches when it uses only
// alternation ({a,b}, not nested); ok is false for any other glob.
func expand(attach string) (paths []string, ok bool) {
	if strings.ContainsAny(attach, "*?[]@\\") {
		return nil, false
	}
	open := strings.IndexByte(attach, '{')
	if open < 0 {
		return []string{attach}, !strings.Contains(attach, "}")
	}
	end := strings.IndexByte(attach[open:], '}')
	if end < 0 {
		return nil, false
	}
	end += open
	inner := attach[open+1 : end]
	if strings.Contains(inner, "{") {
		return nil, false
	}
	for alt := range strings.SplitSeq(inner, ",") {
		rest, ok := expand(attach[:open] + alt + attach[end+1:])
		if !ok {
			return nil, false
		}
		paths = append(paths, rest...)
	}
	return paths, true
}

func TestExpand(t *testing.T) {
	tests := []struct {
		name, attach string
		want         []string
		wantOK       bool
	}{
		{"plain", "/usr/bin/airlock", []string{"/usr/bin/airlock"}, true},
		{"alternation", "/usr/{bin,local/bin}/airlock", []string{"/usr/bin/airlock", "/usr/local/bin/airlock"}, true},
		{"empty-alternative", "/usr/{,local/}bin/airlock", []string{"/usr/bin/airlock", "/usr/local/bin/airlock"}, true},
		{"two-groups", "/{a,b}/{c,d}", []string{"/a/c", "/a/d", "/b/c", "/b/d"}, true},
		{"star", "/home/*/go/bin/airlock", nil, false},
		{"variable", "@{HOME}/go/bin/airlock", nil, false},
		{"nested", "/usr/{bin,{local,opt}/bin}/airlock", nil, false},
		{"unclosed", "/usr/{bin/airlock", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := expand(tt.attach)
			if ok != tt.wantOK || !slices.Equal(got, tt.want) {
				t.Errorf("expand(%q) = %q, %v, want %q, %v", tt.attach, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestProfile checks that the profile grants userns to airlock at each
// path it is installed at, in Ubuntu's form for such profiles, and
// nothing more.
func TestProfile(t *testing.T) {
	src := readFile(t, "airlock")
	f, err := parsePolicy(src)
	if err != nil {
		t.Fatalf("parse airlock: %v", err)
	}
	if want := []string{"abi <abi/4.0>,", "include <tunables/global>"}; !slices.Equal(f.preamble, want) {
		t.Errorf("preamble = %q, want %q", f.preamble, want)
	}
	var covered []string
	for _, p := range f.profiles {
		if !strings.HasPrefix(p.name, "airlock") {
			t.Errorf("profile %s: name must start with airlock, the label doctor reports", p.name)
		}
		paths, ok := expand(p.attach)
		if !ok {
			t.Errorf("profile %s attaches to %q: want absolute paths, alternation at most (a glob may match a path users can write)", p.name, p.attach)
		}
		covered = append(covered, paths...)
		if !slices.Equal(p.flags, []string{"unconfined"}) {
			t.Errorf("profile %s: flags = %q, want exactly unconfined", p.name, p.flags)
		}
		wantRules := []string{"userns,", "include if exists <local/" + p.name + ">"}
		if !slices.Equal(p.rules, wantRules) {
			t.Errorf("profile %s: rules = %q, want %q", p.name, p.rules, wantRules)
		}
	}
	slices.Sort(covered)
	if !slices.Equal(covered, installedAt) {
		t.Errorf("profiles attach to %q, want exactly %q", covered, installedAt)
	}
	// AppArmor attaches by path, so users of go install must edit it.
	if !strings.Contains(src, "~/go/bin/airlock") || !strings.Contains(src, "go install") {
		t.Error("airlock: no comment telling go install users (~/go/bin/airlock) to edit the attachment")
	}
}

// TestReadme checks that the install, check and removal commands in
// README.md and in the profile's own header name this profile.
func TestReadme(t *testing.T) {
	readme := readFile(t, "README.md")
	header := readFile(t, "airlock")
	for _, cmd := range []string{
		"sudo cp packaging/apparmor/airlock /etc/apparmor.d/airlock",
		"sudo apparmor_parser -r /etc/apparmor.d/airlock",
		"airlock doctor",
		"sudo apparmor_parser -R /etc/apparmor.d/airlock",
		"sudo rm /etc/apparmor.d/airlock",
	} {
		if !slices.Contains(shellLines(readme), cmd) {
			t.Errorf("README.md: no shell block runs %q", cmd)
		}
		if !strings.Contains(header, cmd) {
			t.Errorf("airlock header comment does not say %q", cmd)
		}
	}
	for _, s := range []string{"flags=(unconfined)", "kernel.apparmor_restrict_unprivileged_userns=0", "allow_downgrade: [namespaces]", "~/go/bin/airlock"} {
		if !strings.Contains(readme, s) {
			t.Errorf("README.md does not mention %s", s)
		}
	}
}

// shellLines returns the lines of the ```sh blocks of a Markdown text.
func shellLines(md string) []string {
	var out []string
	in := false
	for line := range strings.SplitSeq(md, "\n") {
		switch {
		case line == "```sh":
			in = true
		case line == "```":
			in = false
		case in:
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// TestParserAccepts compiles the profile with apparmor_parser where it
// knows the userns rule (AppArmor 4), without loading it into the kernel.
func TestParserAccepts(t *testing.T) {
	parser, err := exec.LookPath("apparmor_parser")
	if err != nil {
		for _, p := range []string{"/usr/sbin/apparmor_parser", "/sbin/apparmor_parser"} {
			if _, serr := os.Stat(p); serr == nil {
				parser, err = p, nil
				break
			}
		}
	}
	if err != nil {
		t.Skip("apparmor_parser is not installed: the profile is checked structurally only")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, parser, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", parser, err, out)
	}
	m := regexp.MustCompile(`version (\d+)\.`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s --version: no version in %q", parser, out)
	}
	if major, _ := strconv.Atoi(string(m[1])); major < 4 {
		t.Skipf("%s is AppArmor %s.x: the userns rule and abi 4.0 need AppArmor 4", parser, m[1])
	}
	abs, err := filepath.Abs("airlock")
	if err != nil {
		t.Fatal(err)
	}
	// -Q: do not load into the kernel; -K: neither read nor write the cache.
	if out, err := exec.CommandContext(ctx, parser, "-Q", "-K", abs).CombinedOutput(); err != nil {
		t.Errorf("%s -Q -K %s: %v\n%s", parser, abs, err, out)
	}
}
