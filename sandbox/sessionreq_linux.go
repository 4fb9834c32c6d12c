package sandbox

import (
	"errors"
	"path"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// A session's exec names a tool, an environment and a folder; each is
// checked against the plan before anything is sent to the sandbox (and the
// init checks the tool again): the tool here, the environment and the
// folder by the plan (plan.ExecEnv, plan.Workdir).

// resolveTool maps Args[0] to the executable's path inside the sandbox:
// it must be one of the plan's tools (allowed_tools).
func resolveTool(pl *plan.Plan, args []string) (string, error) {
	if len(args) == 0 || args[0] == "" {
		return "", errors.New("exec: no command given")
	}
	name := args[0]
	if strings.HasPrefix(name, "/") {
		if p := path.Clean(name); slices.Contains(pl.Tools, p) {
			return p, nil
		}
		// The sandbox's own symlinks lead /bin/sh to the allowed
		// /usr/bin/sh: the same file, by the name the program used.
		if p, m := resolveInside(pl, name); m != nil && m.Target == p && slices.Contains(pl.Tools, p) {
			return p, nil
		}
	} else if !strings.Contains(name, "/") {
		for _, d := range strings.Split(plan.SandboxPath, ":") {
			if p := d + "/" + name; slices.Contains(pl.Tools, p) {
				return p, nil
			}
		}
	}
	return "", &policy.DenyError{Cap: policy.AllowedTools, Op: "exec", Subject: name, Reason: name + " is not in allowed_tools"}
}
