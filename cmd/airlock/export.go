package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// cmdExport is `airlock export oci`; airlock-server writes the Kubernetes
// manifests (runServer).
func cmdExport(args []string, stdout, stderr io.Writer) int {
	args, code, ok := cli.ExportArgs(args, "oci", stdout, stderr)
	if !ok {
		return code
	}
	var e cli.Export
	fs := e.Flags("oci", stderr)
	rootfs := fs.String("bundle-rootfs", "", "the bundle's root `DIR` (default: an empty DIR/rootfs; everything is bound onto it)")
	hostID := fs.Uint("host-id", oci.DefaultHostID, "unprivileged host uid/gid that root inside maps to; fs_write grants must be writable by it")
	noInit := fs.Bool("no-init", false, "leave COMMAND as the bundle's pid 1 (no signal forwarding, no reaping, no max_wall): for a caller that does all three itself")
	if err := cli.Parse(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cli.ExitOK // -h and --help print the usage and succeed
		}
		return cli.ExitUsage
	}
	pl, p, dir, err := e.Plan(fs)
	if err != nil {
		return e.Fail(err)
	}
	if *hostID == 0 || *hostID > math.MaxUint32 {
		return e.Fail(fmt.Errorf("--host-id %d: give a non-zero 32-bit uid: root inside never maps to host root", *hostID))
	}
	o := oci.Options{BundleDir: dir, Rootfs: *rootfs, HostID: uint32(*hostID), Arch: e.Arch()}
	if !*noInit {
		if o.Init, err = copyInit(dir); err != nil {
			return e.Fail(err)
		}
	}
	return exportOCI(pl, p, dir, o, stdout, stderr, e.Fail)
}

func exportOCI(pl *plan.Plan, p *policy.Policy, dir string, o oci.Options, stdout, stderr io.Writer, fail func(error) int) int {
	b, err := oci.Config(pl, p, o)
	if err != nil {
		return fail(err)
	}
	if err := b.Write(dir); err != nil {
		return fail(err)
	}
	if pl.Proxy {
		fmt.Fprintln(stderr, "airlock export oci: note: the bundle's network namespace is empty and runs no egress proxy, so net_hosts are unreachable (connections fail closed)")
	}
	fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(dir, "config.json"))
	fmt.Fprint(stdout, runInstructions(dir, o, pl))
	return cli.ExitOK
}

// runInstructions says how to run the bundle, with the command lines that
// work on this host.
func runInstructions(dir string, o oci.Options, pl *plan.Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run it with: runc run --bundle %s NAME\n", dir)
	if hybridCgroups() {
		// crun refuses a host that mounts cgroup2 beside v1 controllers.
		fmt.Fprintf(&b, "        or: unshare -m --propagation private sh -c 'umount /sys/fs/cgroup/unified && exec crun run --bundle %s NAME'\n", dir)
		b.WriteString("            (this host mounts cgroup v1 controllers and cgroup2 side by side, which crun refuses unless the cgroup2 mount is hidden in a private mount namespace)\n")
	} else {
		fmt.Fprintf(&b, "        or: crun run --bundle %s NAME\n", dir)
	}
	fmt.Fprintf(&b, "as root; fs_write grants must be writable by uid %d, which root inside maps to\n", o.HostID)
	if d := unsearchable(dir); d != "" {
		fmt.Fprintf(&b, "note: %s is not searchable by uid %d, so the runtime cannot reach the bundle (\"permission denied\" at rootfs): chmod o+x %s, or export somewhere it can reach\n", d, o.HostID, d)
	}
	if o.Init != "" {
		fmt.Fprintf(&b, "pid 1 is airlock's init (%s): it forwards signals, reaps, and kills everything at max_wall (%v, exit 124)\n", oci.InitPath, pl.Limits.Wall)
	} else {
		b.WriteString("COMMAND is pid 1 (--no-init): it ignores signals it has no handler for, and max_wall is not enforced: the caller must enforce the deadline\n")
	}
	return b.String()
}

// unsearchable returns the first of dir and its parents that others may
// not search (the container's mapped uid is "others"), or "".
func unsearchable(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return d
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
}
