package plan_test

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// TestExecEnv: an exec may add variables and override the policy's, never
// the ones airlock sets (PATH, the proxy's, the dynamic loader's), in any
// case, and bad entries are refused.
func TestExecEnv(t *testing.T) {
	pl := &plan.Plan{Env: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HTTP_PROXY=http://127.0.0.1:1"}}
	got, err := plan.ExecEnv(pl, []string{"FOO=bar", "LANG=de_DE.UTF-8", "EMPTY="})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/usr/bin:/bin", "HTTP_PROXY=http://127.0.0.1:1", "FOO=bar", "LANG=de_DE.UTF-8", "EMPTY="}; !slices.Equal(got, want) {
		t.Errorf("ExecEnv = %q, want %q", got, want)
	}
	for _, bad := range []string{"PATH=/evil", "path=/evil", "LD_PRELOAD=/tmp/x.so", "ld_audit=x", "LD_LIBRARY_PATH=/tmp",
		"HTTP_PROXY=http://evil", "https_proxy=x", "ALL_PROXY=x", "no_proxy=*", "NOEQUALS", "=x", "A=b\x00c"} {
		if env, err := plan.ExecEnv(pl, []string{bad}); err == nil || !errors.Is(err, plan.ErrBadRequest) {
			t.Errorf("ExecEnv(%q) = %q, %v; want ErrBadRequest", bad, env, err)
		}
	}
	if len(pl.Env) != 3 || pl.Env[1] != "LANG=C.UTF-8" {
		t.Errorf("ExecEnv changed the plan's own environment: %q", pl.Env)
	}
}

// TestWorkdir: a grant of /work lets a command start in /work and below,
// never in /workshop or /work/../etc; /tmp is always allowed.
func TestWorkdir(t *testing.T) {
	// Not below /tmp, where every folder is allowed.
	dir, err := os.MkdirTemp("/var/tmp", "airlock-workdir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p, err := policy.New(policy.Spec{FSWrite: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{"": dir, dir: dir, dir + "/sub/": dir + "/sub", "/tmp": "/tmp", "/tmp/x/../y": "/tmp/y"} {
		if got, err := plan.Workdir(p, in); err != nil || got != want {
			t.Errorf("Workdir(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{dir + "shop", dir + "/../etc", "/etc", "/", "/tmpfoo"} {
		if got, err := plan.Workdir(p, bad); err == nil || !errors.Is(err, plan.ErrBadRequest) {
			t.Errorf("Workdir(%q) = %q, %v; want ErrBadRequest", bad, got, err)
		}
	}
}
