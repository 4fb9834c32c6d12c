package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// ExportSynopsis is the usage of `airlock export`: airlock writes the OCI
// bundle, airlock-server (which airlock runs for it) the Kubernetes
// manifests.
const ExportSynopsis = `airlock export oci|k8s [--policy FILE] [flags] --out DIR -- COMMAND [ARG]...

Writes the sandbox 'airlock run' would build for COMMAND in a form other
runtimes enforce. Nothing is started.

  oci  an OCI runtime bundle for runc, crun or runsc: DIR/config.json, the
       synthesized files it binds, and an empty DIR/rootfs (unless
       --bundle-rootfs). A policy's environment (rootfs, --rootfs) is carried
       as the binds of its system base and tools.
       Run it with: runc run --bundle DIR NAME
  k8s  DIR/airlock.yaml (NetworkPolicy, egress proxy, Pod) and the seccomp
       profile under DIR/seccomp/, to install below the kubelet's seccomp root.
       The file defines every object it names except what its header lists:
       --image (required; it must hold COMMAND and the allowed tools at the
       paths printed), one --volume per fs_read/fs_write grant (an existing
       PersistentVolumeClaim, or the image's own files for fs_read), the
       RuntimeClass, the proxy image (packaging/egress-proxy builds the
       default). DNS is closed: with net_hosts the Pod reaches the proxy by
       --proxy-cluster-ip, or by name only with --proxy-dns (DNS is then a
       channel out). airlock-server writes it; airlock runs the one in its
       own folder.

'airlock export TARGET --help' lists the flags of TARGET.

example:
  airlock export oci --policy examples/data-analysis.yaml --out bundle -- python3 job.py
  airlock export k8s --policy examples/web-fetch.yaml --image registry.example/agent:1 \
      --proxy-cluster-ip 10.96.0.50 --volume /work/out=claim:agent-work --out k8s -- python3 fetch.py`

// Export is one `airlock export TARGET` in the making: the flags every
// target takes, and what they produce. The zero value is ready for Flags.
type Export struct {
	// Target is "oci" or "k8s", set by Flags.
	Target string

	policy PolicyFlags
	out    string
	arch   string
	stderr io.Writer
}

// ExportArgs checks that args (after `export`) name target first, the one
// target the calling command writes, and returns the arguments after it.
// Otherwise it prints ExportSynopsis, on stdout with exit 0 for -h and
// --help, else on stderr with exit 2, and ok is false.
func ExportArgs(args []string, target string, stdout, stderr io.Writer) (rest []string, code int, ok bool) {
	if len(args) > 0 && args[0] == target {
		return args[1:], ExitOK, true
	}
	if len(args) > 0 && (IsHelp(args[0]) || args[0] == "help") {
		fmt.Fprintf(stdout, "usage: %s\n", ExportSynopsis)
		return nil, ExitOK, false
	}
	fmt.Fprintf(stderr, "usage: %s\n", ExportSynopsis)
	return nil, ExitUsage, false
}

// Flags returns the flag set of `airlock export target`, holding the
// policy flags, --out and --arch; the caller adds the target's own.
func (e *Export) Flags(target string, stderr io.Writer) *flag.FlagSet {
	e.Target, e.stderr = target, stderr
	fs := NewFlagSet("export "+target, ExportSynopsis, stderr)
	e.policy.Register(fs)
	fs.StringVar(&e.out, "out", "", "`DIR` to write into (required)")
	fs.StringVar(&e.arch, "arch", "", "GOARCH the seccomp filter is written for (default: this machine's)")
	return fs
}

// Arch is the GOARCH --arch named; "" for this machine's.
func (e *Export) Arch() string { return e.arch }

// Plan checks --out and the command after the flags (fs's arguments),
// builds the policy and compiles the plan 'airlock run' would enforce,
// and returns it with the policy and the absolute --out folder. It warns
// on stderr that credentials are not exported.
func (e *Export) Plan(fs *flag.FlagSet) (*plan.Plan, *policy.Policy, string, error) {
	if e.out == "" {
		return nil, nil, "", fmt.Errorf("--out DIR is required: the directory to write the %s export into", e.Target)
	}
	if fs.NArg() == 0 {
		return nil, nil, "", errors.New("no command given: put it after --")
	}
	p, err := e.policy.Build()
	if err != nil {
		return nil, nil, "", err
	}
	if cs := p.Credentials(); len(cs) > 0 {
		// Nothing secret is exported; the exported sandbox simply has no
		// one to add the credential, so its requests go without it.
		fmt.Fprintf(e.stderr, "airlock export %s: warning: the policy's %d credentials are not exported: the exported proxy adds none, so requests to %s go without them\n", e.Target, len(cs), cs[0].Host)
	}
	wd, err := e.policy.Cwd(p)
	if err != nil {
		return nil, nil, "", err
	}
	cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: fs.Args(), Dir: wd, CommandIsGranted: true}
	pl, err := cmd.Plan()
	if err != nil {
		return nil, nil, "", err
	}
	dir, err := filepath.Abs(e.out)
	if err != nil {
		return nil, nil, "", err
	}
	return pl, p, dir, nil
}

// Fail prints err as `airlock export TARGET: MESSAGE` and returns
// ExitFailed.
func (e *Export) Fail(err error) int {
	fmt.Fprintf(e.stderr, "airlock export %s: %s\n", e.Target, ErrText(err))
	return ExitFailed
}
