package pathspec_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy/pathspec"
)

func TestClean(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"root", "/", "/"},
		{"empty", "", "/"},
		{"plain", "/work/a", "/work/a"},
		{"trailing-slash", "/work/", "/work"},
		{"double-slash", "//work//a", "/work/a"},
		{"dot", "/work/./a/.", "/work/a"},
		{"dotdot", "/work/a/../b", "/work/b"},
		{"dotdot-escape", "/work/../etc/passwd", "/etc/passwd"},
		{"dotdot-at-root", "/../../etc", "/etc"},
		{"only-dotdot", "/..", "/"},
		{"relative", "work/a", "/work/a"},
		{"relative-dotdot", "../../etc", "/etc"},
		{"dots-name", "/work/...", "/work/..."},
		{"dotdot-prefix-name", "/work/..a", "/work/..a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pathspec.Clean(tt.in); got != tt.want {
				t.Errorf("Clean(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestAbs(t *testing.T) {
	tests := []struct {
		name, base, in, want string
		err                  error
	}{
		{"absolute", "", "/data/x", "/data/x", nil},
		{"absolute-ignores-base", "/base", "/data/../x", "/x", nil},
		{"relative", "/base", "a/b", "/base/a/b", nil},
		{"relative-dot", "/base", ".", "/base", nil},
		{"relative-dotdot", "/base/sub", "../x", "/base/x", nil},
		{"relative-escape-root", "/base", "../../../etc", "/etc", nil},
		{"base-trailing-slash", "/base/", "a", "/base/a", nil},
		{"no-base", "", "a", "", pathspec.ErrRelative},
		{"relative-base", "base", "a", "", pathspec.ErrRelative},
		{"empty", "/base", "", "", pathspec.ErrInvalid},
		{"nul", "/base", "a\x00b", "", pathspec.ErrInvalid},
		{"nul-absolute", "", "/etc/passwd\x00.txt", "", pathspec.ErrInvalid},
		{"nul-base", "/ba\x00se", "/a", "", pathspec.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pathspec.Abs(tt.base, tt.in)
			if got != tt.want || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Errorf("Abs(%q, %q) = %q, %v, want %q, %v", tt.base, tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestWithin(t *testing.T) {
	tests := []struct {
		name, root, path string
		want             bool
	}{
		{"same", "/work", "/work", true},
		{"child", "/work", "/work/a/b", true},
		{"prefix-not-child", "/work", "/workshop", false},
		{"prefix-not-child-deep", "/work", "/workshop/a", false},
		{"parent", "/work/a", "/work", false},
		{"sibling", "/work/a", "/work/b", false},
		{"dotdot-escape", "/work", "/work/../etc", false},
		{"dotdot-stays", "/work", "/work/a/../b", true},
		{"dotdot-at-root", "/work", "/../work/a", true},
		{"dot", "/work", "/work/./a", true},
		{"double-slash", "/work", "//work//a", true},
		{"trailing-slash-root", "/work/", "/work/a", true},
		{"trailing-slash-path", "/work", "/work/", true},
		{"root-contains-all", "/", "/etc/passwd", true},
		{"root-self", "/", "/", true},
		{"dotdot-root", "/work/..", "/etc", true},
		{"empty-root", "", "/etc", false},
		{"empty-path", "/work", "", false},
		{"relative-root", "work", "/work/a", false},
		{"relative-path", "/work", "work/a", false},
		{"nul-root", "/work\x00", "/work/a", false},
		{"nul-path", "/work", "/work/a\x00b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pathspec.Within(tt.root, tt.path); got != tt.want {
				t.Errorf("Within(%q, %q) = %v, want %v", tt.root, tt.path, got, tt.want)
			}
		})
	}
}

// FuzzClean checks that Clean is idempotent, absolute and free of ".."
// elements, and that Within never accepts a path outside the root.
func FuzzClean(f *testing.F) {
	f.Add("/work/../etc", "/work")
	f.Fuzz(func(t *testing.T, p, root string) {
		c := pathspec.Clean(p)
		if again := pathspec.Clean(c); again != c {
			t.Fatalf("Clean(%q) = %q, want %q (from %q)", c, again, c, p)
		}
		if !strings.HasPrefix(c, "/") {
			t.Fatalf("Clean(%q) = %q, want a leading /", p, c)
		}
		for _, e := range strings.Split(c, "/") {
			if e == ".." || e == "." {
				t.Fatalf("Clean(%q) = %q, want no %q element", p, c, e)
			}
		}
		if !pathspec.Within(root, p) {
			return
		}
		r := pathspec.Clean(root)
		if r != "/" && c != r && !strings.HasPrefix(c, r+"/") {
			t.Fatalf("Within(%q, %q) = true, but %q is outside %q", root, p, c, r)
		}
	})
}

func BenchmarkWithin(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		pathspec.Within("/work/data", "/work/data/reports/q3.csv")
		pathspec.Within("/work/data", "/work/database")
	}
}
