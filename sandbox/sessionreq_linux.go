package sandbox

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// A session's exec names a tool, an environment and a folder; each is
// checked against the plan before anything is sent to the sandbox (and the
// init checks the tool again).

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

// env returns the plan's environment plus the exec's additions; variables
// airlock controls cannot be changed.
func execEnv(pl *plan.Plan, extra []string) ([]string, error) {
	env := slices.Clone(pl.Env)
	for _, kv := range extra {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return nil, fmt.Errorf("exec env %q: want NAME=value", kv)
		}
		switch strings.ToUpper(k) {
		case "PATH", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT":
			return nil, fmt.Errorf("exec env %q: %s is set by airlock and cannot be changed per exec", kv, k)
		}
		env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		env = append(env, kv)
	}
	return env, nil
}

func checkDir(p *policy.Policy, dir string) (string, error) {
	if !strings.HasPrefix(dir, "/") {
		return "", fmt.Errorf("exec dir %q: use an absolute path inside the sandbox", dir)
	}
	c := path.Clean(dir)
	if c == "/tmp" || strings.HasPrefix(c, "/tmp/") || p.CanRead(c) {
		return c, nil
	}
	return "", fmt.Errorf("exec dir %q is outside fs_read, fs_write and /tmp", dir)
}
