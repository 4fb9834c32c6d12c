package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// placedPolicy grants host folder proj at /workspace and a read-only data
// folder at /data, with a protected file and a hidden one inside.
func placedPolicy(t *testing.T, proj, data string, extra policy.Spec) *policy.Policy {
	t.Helper()
	extra.FSWrite = append(extra.FSWrite, proj+":/workspace")
	extra.FSRead = append(extra.FSRead, data+":/data")
	extra.FSProtect = append(extra.FSProtect, filepath.Join(proj, "deploy.sh"))
	extra.FSDeny = append(extra.FSDeny, filepath.Join(proj, ".env"))
	extra.AllowedTools = append(extra.AllowedTools, "sh", "cat", "ls")
	extra.AllowDowngrade = append(extra.AllowDowngrade, airtest.RootlessDowngrades()...)
	p, err := policy.New(extra)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlacedGrants: a grant placed at /workspace is read and written there
// and nowhere else: the host path does not exist inside, writes reach the
// host folder at the end, fs_protect and fs_deny follow the grant to its
// place, a symlink in the folder that names the host path (or climbs out
// of the place) leads nowhere, the read-only placed grant refuses writes,
// and the session's file API speaks the inside paths (the host path is
// refused). With an environment too.
func TestPlacedGrants(t *testing.T) {
	requireSandbox(t)
	proj, data := t.TempDir(), t.TempDir()
	write := func(dir, name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(proj, "main.py", "print('hi')\n")
	write(proj, "deploy.sh", "#!/bin/sh\n")
	write(proj, ".env", "SECRET=1\n")
	write(data, "in.csv", "a,b\n")
	if err := os.Symlink(filepath.Join(data, "in.csv"), filepath.Join(proj, "hostlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../.."+data+"/in.csv", filepath.Join(proj, "climb")); err != nil {
		t.Fatal(err)
	}

	script := `cd /workspace
cat main.py
cat /data/in.csv
echo out > new.txt
echo more >> main.py
echo x > deploy.sh 2>/dev/null && echo "wrote deploy.sh"
cat .env 2>/dev/null
cat hostlink 2>/dev/null && echo "followed hostlink"
cat climb 2>/dev/null && echo "followed climb"
echo y > /data/new 2>/dev/null && echo "wrote /data"
for p in ` + proj + ` ` + data + `; do test -e "$p" && echo "host path $p exists"; done
ls /workspace
true`
	for _, env := range []string{"", os.Getenv("AIRLOCK_TEST_ROOTFS")} {
		name := "host-base"
		if env != "" {
			name = "environment"
		}
		t.Run(name, func(t *testing.T) {
			if env == "" && name == "environment" {
				t.Skip("no environment")
			}
			p := placedPolicy(t, proj, data, policy.Spec{Rootfs: env})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: []string{"/bin/sh", "-c", script}, CommandIsGranted: true}).Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.ExitCode != 0 {
				t.Fatalf("exit %d %q\nstdout:\n%s\nstderr:\n%s", rep.ExitCode, rep.Error, rep.Stdout, rep.Stderr)
			}
			for _, bad := range []string{"wrote deploy.sh", "SECRET=1", "followed hostlink", "followed climb", "wrote /data", "host path"} {
				if strings.Contains(rep.Stdout, bad) {
					t.Errorf("%s:\n%s", bad, rep.Stdout)
				}
			}
			if !strings.Contains(rep.Stdout, "print('hi')") || !strings.Contains(rep.Stdout, "a,b") {
				t.Errorf("the placed grants' files are not at their places:\n%s", rep.Stdout)
			}
			if b, err := os.ReadFile(filepath.Join(proj, "new.txt")); err != nil || string(b) != "out\n" {
				t.Errorf("a write at /workspace did not reach the host folder: %q %v", b, err)
			}
			if b, _ := os.ReadFile(filepath.Join(proj, "deploy.sh")); string(b) != "#!/bin/sh\n" {
				t.Errorf("deploy.sh changed on the host: %q", b)
			}
			os.Remove(filepath.Join(proj, "new.txt"))
			write(proj, "main.py", "print('hi')\n")
		})
	}

	t.Run("file-api", func(t *testing.T) {
		p := placedPolicy(t, proj, data, policy.Spec{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if ws := s.Info().Workspace; ws != "/workspace" {
			t.Errorf("session workspace = %q, want /workspace", ws)
		}
		g := s.Guard()
		if b, err := g.Read("/workspace/main.py"); err != nil || string(b) != "print('hi')\n" {
			t.Errorf("guard read /workspace/main.py = %q %v", b, err)
		}
		if err := g.Write("/workspace/api.txt", []byte("api")); err != nil {
			t.Errorf("guard write /workspace/api.txt: %v", err)
		}
		for _, hostPath := range []string{filepath.Join(proj, "main.py"), filepath.Join(data, "in.csv")} {
			if _, err := g.Read(hostPath); err == nil {
				t.Errorf("guard read the host path %s", hostPath)
			}
		}
		if _, err := g.Read("/workspace/.env"); err == nil {
			t.Errorf("guard read fs_deny at its place")
		}
		if err := g.Write("/data/x", []byte("x")); err == nil {
			t.Errorf("guard wrote into the read-only placed grant")
		}
		rep, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"cat", "api.txt"}})
		if err != nil || rep.Stdout != "api" {
			t.Errorf("exec in the workspace after a file-API write: %+v %v", rep, err)
		}
		s.Close()
		if b, err := os.ReadFile(filepath.Join(proj, "api.txt")); err != nil || string(b) != "api" {
			t.Errorf("the file API's write did not reach the host folder: %q %v", b, err)
		}
	})

	t.Run("landlock-refuses", func(t *testing.T) {
		p := placedPolicy(t, proj, data, policy.Spec{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p, Isolation: sandbox.IsolationLandlock}, Args: []string{"/bin/true"}, CommandIsGranted: true}).Run(ctx)
		msg := ""
		if err != nil {
			msg = err.Error()
		} else {
			msg = rep.Error
		}
		if !strings.Contains(msg, "HOST:INSIDE") || !strings.Contains(msg, "nothing was started") {
			t.Errorf("landlock backend with a placed grant: %q", msg)
		}
	})
}

// TestAttacksWithPlacedGrants: the filesystem attack tests again, with
// every grant placed below /placed instead of at its host path: what the
// attacks name by host path (a sibling, .., a symlink's absolute target,
// /proc's roots) is nowhere inside, and the grants through symlinks are
// still refused.
func TestAttacksWithPlacedGrants(t *testing.T) {
	requireSandbox(t)
	specVariant = func(s *policy.Spec) {
		for _, l := range []*[]string{&s.FSRead, &s.FSWrite} {
			for i, g := range *l {
				if !strings.Contains(g, ":/") {
					(*l)[i] = g + ":/placed" + g
				}
			}
		}
	}
	defer func() { specVariant = nil }()
	t.Run("FilesystemReads", TestAttackFilesystemReads)
	t.Run("SymlinkAndHardlink", TestAttackSymlinkAndHardlink)
	t.Run("GrantThroughSymlinkRefused", TestAttackGrantThroughSymlinkRefused)
	t.Run("WritesAndMounts", TestAttackWritesAndMounts)
}
