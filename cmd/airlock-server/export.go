package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/export/k8s"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/termtext"
)

// cmdExport is `airlock export k8s`; airlock writes the OCI bundle itself.
func cmdExport(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "oci" {
		fmt.Fprintln(stderr, "airlock-server export: airlock writes the OCI bundle itself: run airlock export oci")
		return cli.ExitUsage
	}
	args, code, ok := cli.ExportArgs(args, "k8s", stdout, stderr)
	if !ok {
		return code
	}
	var e cli.Export
	fs := e.Flags("k8s", stderr)
	ns := fs.String("namespace", "", "namespace of every object (default: kubectl's current one)")
	name := fs.String("name", k8s.DefaultName, "Pod name, prefix of the other objects")
	image := fs.String("image", "", "`IMAGE` holding COMMAND and the allowed tools at the paths the export prints (required: airlock cannot look inside remote images)")
	proxyImage := fs.String("proxy-image", k8s.DefaultProxyImage, "image running 'airlock egress-proxy' (the default is what packaging/egress-proxy/README.md builds)")
	proxyIP := fs.String("proxy-cluster-ip", "", "free `IP` of the cluster's Service range, pinned as the proxy Service's clusterIP; the Pod reaches the proxy there with DNS closed (needed with net_hosts unless --proxy-dns)")
	proxyDNS := fs.Bool("proxy-dns", false, "let the cluster pick the proxy's address and allow the Pod DNS to kube-dns so the proxy's name resolves: DNS is a channel out (default: DNS closed)")
	volumes := map[string]k8s.Volume{}
	fs.Func("volume", "`PATH=claim:NAME` backs the fs_read/fs_write grant PATH with the existing PersistentVolumeClaim NAME; PATH=new:SIZE defines a new, empty claim of SIZE (e.g. 1Gi) for an fs_write grant; PATH=image says the image holds an fs_read grant (repeatable; every grant needs one)", func(s string) error {
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
	rtClass := fs.String("runtime-class", k8s.DefaultRuntimeClass, `runtimeClassName, a RuntimeClass that must exist in the cluster (the Pod is refused otherwise); "" leaves it out (the cluster default, usually runc)`)
	account := fs.String("service-account", k8s.DefaultServiceAccount, "existing ServiceAccount the Pod and the proxy run as, with no token mounted (every namespace has \"default\")")
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
	o := k8s.Options{Name: *name, Namespace: *ns, Image: *image, RuntimeClass: *rtClass, NoRuntimeClass: *rtClass == "",
		ProxyImage: *proxyImage, ProxyClusterIP: *proxyIP, ProxyDNS: *proxyDNS, ServiceAccount: *account, Volumes: volumes, Arch: e.Arch()}
	m, err := k8s.Export(pl, p, o)
	if err != nil {
		return e.Fail(err)
	}
	if err := m.Write(dir); err != nil {
		return e.Fail(err)
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
	return cli.ExitOK
}
