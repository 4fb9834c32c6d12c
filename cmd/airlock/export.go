package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/export/k8s"
	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

const exportSynopsis = `airlock export oci|k8s [--policy FILE] [flags] --out DIR -- COMMAND [ARG]...

Writes the sandbox 'airlock run' would build for COMMAND in a form other
runtimes enforce. Nothing is started.

  oci  an OCI runtime bundle for runc, crun or runsc: DIR/config.json, the
       synthesized files it binds, and an empty DIR/rootfs (unless --rootfs).
       Run it with: runc run --bundle DIR NAME
  k8s  DIR/airlock.yaml (NetworkPolicy, egress proxy, Pod) and the seccomp
       profile under DIR/seccomp/, to install below the kubelet's seccomp root.

example:
  airlock export oci --policy examples/data-analysis.yaml --out bundle -- python3 job.py`

func cmdExport(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "oci" && args[0] != "k8s") {
		fmt.Fprintf(stderr, "usage: %s\n", exportSynopsis)
		return exitUsage
	}
	target := args[0]
	fs := newFlagSet("export "+target, exportSynopsis, stderr)
	var pf policyFlags
	pf.register(fs)
	out := fs.String("out", "", "`DIR` to write into (required)")
	arch := fs.String("arch", "", "GOARCH the seccomp filter is written for (default: this machine's)")
	rootfs := fs.String("rootfs", "", "oci: root filesystem `DIR` (default: an empty DIR/rootfs; everything is bound)")
	hostID := fs.Uint("host-id", oci.DefaultHostID, "oci: unprivileged host uid/gid that root inside maps to; fs_write grants must be writable by it")
	ns := fs.String("namespace", "", "k8s: namespace of every object (default: kubectl's current one)")
	name := fs.String("name", k8s.DefaultName, "k8s: Pod name, prefix of the other objects")
	image := fs.String("image", k8s.DefaultImage, "k8s: image holding COMMAND and the allowed tools")
	proxyImage := fs.String("proxy-image", k8s.DefaultProxyImage, "k8s: image running 'airlock egress-proxy'")
	proxyIP := fs.String("proxy-cluster-ip", "", "k8s: fixed clusterIP for the proxy Service; then the Pod needs no DNS")
	rtClass := fs.String("runtime-class", k8s.DefaultRuntimeClass, `k8s: runtimeClassName; "" leaves it out (the cluster default, usually runc)`)
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "airlock export %s: %s\n", target, errText(err))
		return exitFailed
	}
	if *out == "" {
		return fail(fmt.Errorf("--out DIR is required: the directory to write the %s export into", target))
	}
	if fs.NArg() == 0 {
		return fail(fmt.Errorf("no command given: put it after --"))
	}
	p, err := pf.build()
	if err != nil {
		return fail(err)
	}
	cmd := &sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: fs.Args(), Dir: pf.cwd, CommandIsGranted: true}
	pl, err := cmd.Plan()
	if err != nil {
		return fail(err)
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		return fail(err)
	}
	if target == "oci" {
		if *hostID == 0 || *hostID > math.MaxUint32 {
			return fail(fmt.Errorf("--host-id %d: give a non-zero 32-bit uid: root inside never maps to host root", *hostID))
		}
		return exportOCI(pl, p, dir, oci.Options{BundleDir: dir, Rootfs: *rootfs, HostID: uint32(*hostID), Arch: *arch}, stdout, stderr, fail)
	}
	o := k8s.Options{Name: *name, Namespace: *ns, Image: *image, RuntimeClass: *rtClass, NoRuntimeClass: *rtClass == "",
		ProxyImage: *proxyImage, ProxyClusterIP: *proxyIP, Arch: *arch}
	return exportK8s(pl, p, dir, o, stdout, fail)
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
	fmt.Fprintf(stdout, "wrote %s\nrun it with: runc run --bundle %s NAME (fs_write grants must be writable by uid %d)\n", filepath.Join(dir, "config.json"), dir, o.HostID)
	return exitOK
}

func exportK8s(pl *plan.Plan, p *policy.Policy, dir string, o k8s.Options, stdout io.Writer, fail func(error) int) int {
	m, err := k8s.Export(pl, p, o)
	if err != nil {
		return fail(err)
	}
	y, err := m.YAML()
	if err != nil {
		return fail(err)
	}
	prof := filepath.Join(dir, "seccomp", filepath.FromSlash(m.SeccompPath))
	if err := os.MkdirAll(filepath.Dir(prof), 0o755); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(prof, append(m.Seccomp, '\n'), 0o644); err != nil {
		return fail(err)
	}
	manifest := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(manifest, y, 0o644); err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "wrote %s\nwrote %s (install it on every node as /var/lib/kubelet/seccomp/%s)\n", manifest, prof, m.SeccompPath)
	return exitOK
}
