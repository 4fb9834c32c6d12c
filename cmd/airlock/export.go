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

	"github.com/airlock-sandbox/airlock/export/k8s"
	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

const exportSynopsis = `airlock export oci|k8s [--policy FILE] [flags] --out DIR -- COMMAND [ARG]...

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
       channel out).

example:
  airlock export oci --policy examples/data-analysis.yaml --out bundle -- python3 job.py
  airlock export k8s --policy examples/web-fetch.yaml --image registry.example/agent:1 \
      --proxy-cluster-ip 10.96.0.50 --volume /work/out=claim:agent-work --out k8s -- python3 fetch.py`

func cmdExport(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "oci" && args[0] != "k8s") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fmt.Fprintf(stdout, "usage: %s\n", exportSynopsis)
			return 0
		}
		fmt.Fprintf(stderr, "usage: %s\n", exportSynopsis)
		return exitUsage
	}
	target := args[0]
	fs := newFlagSet("export "+target, exportSynopsis, stderr)
	var pf policyFlags
	pf.register(fs)
	out := fs.String("out", "", "`DIR` to write into (required)")
	arch := fs.String("arch", "", "GOARCH the seccomp filter is written for (default: this machine's)")
	rootfs := fs.String("bundle-rootfs", "", "oci: the bundle's root `DIR` (default: an empty DIR/rootfs; everything is bound onto it)")
	hostID := fs.Uint("host-id", oci.DefaultHostID, "oci: unprivileged host uid/gid that root inside maps to; fs_write grants must be writable by it")
	ns := fs.String("namespace", "", "k8s: namespace of every object (default: kubectl's current one)")
	name := fs.String("name", k8s.DefaultName, "k8s: Pod name, prefix of the other objects")
	image := fs.String("image", "", "k8s: `IMAGE` holding COMMAND and the allowed tools at the paths the export prints (required: airlock cannot look inside remote images)")
	proxyImage := fs.String("proxy-image", k8s.DefaultProxyImage, "k8s: image running 'airlock egress-proxy' (the default is what packaging/egress-proxy/README.md builds)")
	proxyIP := fs.String("proxy-cluster-ip", "", "k8s: free `IP` of the cluster's Service range, pinned as the proxy Service's clusterIP; the Pod reaches the proxy there with DNS closed (needed with net_hosts unless --proxy-dns)")
	proxyDNS := fs.Bool("proxy-dns", false, "k8s: let the cluster pick the proxy's address and allow the Pod DNS to kube-dns so the proxy's name resolves: DNS is a channel out (default: DNS closed)")
	volumes := map[string]k8s.Volume{}
	fs.Func("volume", "k8s: `PATH=claim:NAME` backs the fs_read/fs_write grant PATH with the existing PersistentVolumeClaim NAME; PATH=image says the image holds an fs_read grant (repeatable; every grant needs one)", func(s string) error {
		p, v, err := k8s.ParseVolume(s)
		if err != nil {
			return err
		}
		if _, dup := volumes[p]; dup {
			return fmt.Errorf("volume for %s given twice: give one per grant", p)
		}
		volumes[p] = v
		return nil
	})
	rtClass := fs.String("runtime-class", k8s.DefaultRuntimeClass, `k8s: runtimeClassName, a RuntimeClass the cluster defines; "" leaves it out (the cluster default, usually runc)`)
	noInit := fs.Bool("no-init", false, "oci: leave COMMAND as the bundle's pid 1 (no signal forwarding, no reaping, no max_wall): for a caller that does all three itself")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h and --help print the usage and succeed
		}
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
	if cs := p.Credentials(); len(cs) > 0 {
		// Nothing secret is exported; the exported sandbox simply has no
		// one to add the credential, so its requests go without it.
		fmt.Fprintf(stderr, "airlock export %s: warning: the policy's %d credentials are not exported: the exported proxy adds none, so requests to %s go without them\n", target, len(cs), cs[0].Host)
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
		o := oci.Options{BundleDir: dir, Rootfs: *rootfs, HostID: uint32(*hostID), Arch: *arch}
		if !*noInit {
			if o.Init, err = copyInit(dir); err != nil {
				return fail(err)
			}
		}
		return exportOCI(pl, p, dir, o, stdout, stderr, fail)
	}
	o := k8s.Options{Name: *name, Namespace: *ns, Image: *image, RuntimeClass: *rtClass, NoRuntimeClass: *rtClass == "",
		ProxyImage: *proxyImage, ProxyClusterIP: *proxyIP, ProxyDNS: *proxyDNS, Volumes: volumes, Arch: *arch}
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
	fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(dir, "config.json"))
	fmt.Fprint(stdout, runInstructions(dir, o, pl))
	return exitOK
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

func exportK8s(pl *plan.Plan, p *policy.Policy, dir string, o k8s.Options, stdout io.Writer, fail func(error) int) int {
	m, err := k8s.Export(pl, p, o)
	if err != nil {
		return fail(err)
	}
	if err := m.Write(dir); err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "wrote %s\nwrote %s\n", filepath.Join(dir, k8s.ManifestFile), filepath.Join(dir, k8s.SeccompDir, filepath.FromSlash(m.SeccompPath)))
	b := []string{"before kubectl apply -f " + filepath.Join(dir, k8s.ManifestFile) + ", provide what it refers to outside itself:"}
	outside := m.Outside
	if pl.Rootfs != "" {
		// In a Pod the environment is the image: the export checked the
		// command and the tools at the environment's paths.
		env := p.Rootfs()
		if pl.RootfsImage != "" {
			env = pl.RootfsImage
		}
		how := "tar -C " + pl.Rootfs + " -c . | podman import - " + o.Image
		if pl.RootfsImage != "" {
			how = "ctr -n k8s.io images import the image archive, tagged " + o.Image
		}
		outside = append(outside, "the environment "+env+" (rootfs) as image "+o.Image+": the Pod's root filesystem is its image, so --image must be the environment ("+how+")")
	}
	for _, l := range outside {
		b = append(b, "  "+termtext.Escape(l, termtext.LineMax))
	}
	fmt.Fprintln(stdout, strings.Join(b, "\n"))
	return exitOK
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
