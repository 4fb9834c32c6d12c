package plan_test

import (
	"path"
	"testing"

	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// countingHost is fakeHost with a workspace /work (a folder with .git
// and .ssh in it) that counts each path's lookups.
type countingHost struct {
	fakeHost
	n map[string]int
}

func (h *countingHost) Lstat(p string) (bool, bool, string, error) {
	h.n[p]++
	switch p {
	case "/work", "/work/.git", "/work/.git/hooks", "/work/.ssh":
		return true, true, "", nil
	}
	return h.fakeHost.Lstat(p)
}

// TestCompileLooksUpEachPathOnce: the protected paths inside a grant are
// resolved without looking their common ancestors up again for each one
// (about 300 lookups for one workspace before, on the critical path of
// every session the API creates), and nothing is looked up below a path
// that does not exist.
func TestCompileLooksUpEachPathOnce(t *testing.T) {
	p := mustPolicy(t, policy.Spec{FSWrite: []string{"/work"}, FSDeny: []string{"/work/secrets/key"}})
	h := &countingHost{n: map[string]int{}}
	pl, err := plan.Compile(p, plan.Request{Argv: []string{"sh"}, CommandIsGranted: true}, h)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Protections()) < 10 {
		t.Fatalf("only %d protections: the test needs the built-in list", len(p.Protections()))
	}
	// The stage, the .git check and the protections' walk: at most three.
	if n := h.n["/work"]; n > 3 {
		t.Errorf("/work was looked up %d times", n)
	}
	for q := range h.n {
		for dir := path.Dir(q); dir != "/" && dir != "."; dir = path.Dir(dir) {
			if h.n[dir] > 0 {
				if exists, _, _, _ := h.Lstat(dir); !exists {
					t.Errorf("%s was looked up below %s, which does not exist", q, dir)
				}
				break
			}
		}
	}
	// What is there is still protected: .git/hooks and .ssh are read-only.
	ro := map[string]bool{}
	for _, m := range pl.Mounts {
		if m.Kind == plan.KindReadonly {
			ro[m.Target] = true
		}
	}
	for _, want := range []string{"/work/.git/hooks", "/work/.ssh"} {
		if !ro[want] {
			t.Errorf("%s is not mounted read-only; mounts: %+v", want, pl.Mounts)
		}
	}
}
