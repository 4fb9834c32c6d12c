package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// CwdHint explains, after a command failed, that it started somewhere
// else than the current folder and that an argument names a file relative
// to the current folder that is not where the command looked: the usual
// cause of `can't open file '/tmp/job.py'`. It returns "" when there is
// nothing to explain: --cwd was given, the command started in the current
// folder, or no argument is such a file. p is the policy Build returned
// and argv the command.
func (f *PolicyFlags) CwdHint(p *policy.Policy, argv []string) string {
	if f.cwd != "" || f.wd == "" || p.CanRead(f.wd) {
		return ""
	}
	dir, err := plan.Workdir(p, "")
	if err != nil {
		return ""
	}
	why := "a command then starts in the first fs_write grant"
	if fi, err := os.Stat(dir); dir == "/tmp" || err != nil || !fi.IsDir() {
		dir, why = "/tmp", "without an fs_write folder a command starts in /tmp"
	}
	for i, a := range argv {
		if !relativeFile(a, i == 0) {
			continue
		}
		if fi, err := os.Stat(filepath.Join(f.wd, a)); err != nil || fi.IsDir() {
			continue // not a file of the current folder
		}
		if dir != "/tmp" {
			if _, err := os.Lstat(filepath.Join(dir, a)); err == nil {
				continue // the sandbox's folder has one of that name too
			}
		}
		inside := p.Inside(dir)
		return fmt.Sprintf("airlock run: the command started in %s, not in the current folder %s (no grant covers the current folder and no --cwd was given; %s), so \"%s\" was looked for in %s. Grant the current folder (--fs-read . or --fs-write .) to start there, or pass --cwd DIR, or name the file by its absolute path.",
			termtext.Field(inside), termtext.Field(f.wd), why, termtext.Field(a), termtext.Field(inside))
	}
	return ""
}

// relativeFile reports whether the argument a can name a file relative to
// the working folder: not a flag, not absolute, short. A command name
// (first) counts only with a slash in it (./job.sh): a bare name is looked
// up on PATH.
func relativeFile(a string, first bool) bool {
	if a == "" || len(a) > 4096 || strings.HasPrefix(a, "-") || strings.HasPrefix(a, "/") || strings.ContainsRune(a, 0) {
		return false
	}
	return !first || strings.Contains(a, "/")
}
