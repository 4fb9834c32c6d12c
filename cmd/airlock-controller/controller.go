package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/airlock-sandbox/airlock/controller"
	"github.com/airlock-sandbox/airlock/internal/cli"
)

const controllerSynopsis = `airlock controller --airlock-image IMAGE [--kubeconfig FILE] [--namespace NS]... [flags]

Runs the airlock controller: each Sandbox (airlock.dev/v1alpha1) becomes a
Pod whose container runs 'airlock run --isolation landlock' under the
Sandbox's policy, and the run's exit code and report (cut to 4096 bytes)
come back into the Sandbox's status; each SandboxTemplate keeps its warm
pool of Pods that wait for a claim. Install the CRDs first:

  kubectl apply -f controller/api/v1alpha1/crd/

and packaging/controller/ (the controller's ServiceAccount, and the admission
policy that keeps everyone else from changing or imitating its Pods).

The enforcer comes from the operator's image (--airlock-image, required),
never from the image a Sandbox names: each Pod's init container runs
'airlock-controller install' from it, which copies airlock and airlock-init
(static, in /usr/local/bin beside airlock-controller) and the policy into a
volume the sandbox container runs airlock from, read-only. Name the image
by digest (IMAGE@sha256:...). The Sandboxes' images hold only what the
commands need. SIGTERM or SIGINT stops the controller.`

// cmdController runs `airlock controller`.
func cmdController(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("controller", controllerSynopsis, stderr)
	kubeconfig := fs.String("kubeconfig", "", "the kubeconfig `FILE` to use; empty: $KUBECONFIG, then the in-cluster ServiceAccount, then ~/.kube/config")
	var namespaces multiFlag
	fs.Var(&namespaces, "namespace", "watch only this `NS` (repeatable); none: every namespace")
	metricsAddr := fs.String("metrics-addr", "0", "serve Prometheus metrics at `ADDR` (host:port); 0: off")
	healthAddr := fs.String("health-addr", "0", "serve /healthz and /readyz at `ADDR` (host:port); 0: off")
	leaderElect := fs.Bool("leader-elect", false, "take a Lease before reconciling, so that only one of several replicas acts")
	leaderNS := fs.String("leader-election-namespace", "", "the namespace of the Lease (with --leader-elect); empty: the in-cluster namespace")
	airlockImage := fs.String("airlock-image", "", "the operator's `IMAGE` the Pods' enforcer comes from (required): it holds airlock-controller, airlock and airlock-init in "+controller.ImageBin+"; name it by digest")
	pullPolicy := fs.String("airlock-image-pull-policy", string(corev1.PullIfNotPresent), "the `POLICY` to pull --airlock-image with: Always, IfNotPresent or Never")
	warm := fs.Duration("warm-lifetime", controller.DefaultWarmLifetime, "how long a warm Pod waits for a claim before it is replaced")
	workers := fs.Int("workers", controller.DefaultWorkers, "how many Sandboxes are reconciled at once")
	podSeccomp := fs.String("pod-seccomp", "RuntimeDefault", "the Pods' seccomp `PROFILE`: RuntimeDefault, Unconfined or Localhost/PATH (airlock adds its own filter for the command beneath it; a policy with net_hosts needs a profile that allows pidfd_getfd, which containerd's and Docker's default refuse)")
	hostNetwork := fs.Bool("pod-host-network", false, "run the Pods in the node's network namespace, for a cluster without a pod network (airlock still refuses every connect but its egress proxy's; the restricted and baseline Pod Security levels refuse such Pods)")
	if err := cli.Parse(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cli.ExitOK
		}
		return cli.ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "airlock controller: unexpected argument %q: it takes flags only\n", fs.Arg(0))
		return cli.ExitUsage
	}
	if *warm <= 0 {
		fmt.Fprintln(stderr, "airlock controller: --warm-lifetime must be positive, such as 1h")
		return cli.ExitUsage
	}
	if *workers < 1 || *workers > 64 {
		fmt.Fprintf(stderr, "airlock controller: --workers %d: use 1 to 64\n", *workers)
		return cli.ExitUsage
	}
	if *airlockImage == "" {
		fmt.Fprintln(stderr, "airlock controller: --airlock-image is required: the operator's image that holds airlock-controller, airlock and airlock-init in "+controller.ImageBin+" (the Pods run airlock from it, never from the Sandboxes' images)")
		return cli.ExitUsage
	}
	pull, err := controller.ParsePullPolicy(*pullPolicy)
	if err != nil {
		fmt.Fprintf(stderr, "airlock controller: --airlock-image-pull-policy: %s\n", cli.ErrText(err))
		return cli.ExitUsage
	}
	sc, err := controller.ParseSeccomp(*podSeccomp)
	if err != nil {
		fmt.Fprintf(stderr, "airlock controller: --pod-seccomp: %s\n", cli.ErrText(err))
		return cli.ExitUsage
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "airlock controller: kubeconfig: %s; name one with --kubeconfig or run it in a Pod with a ServiceAccount\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	scheme, err := controller.Scheme()
	if err != nil {
		fmt.Fprintf(stderr, "airlock controller: airlock bug: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	log := cli.NewLogger(stderr)
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	opts := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *healthAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "airlock-controller.airlock.dev",
		LeaderElectionNamespace: *leaderNS,
		Cache:                   controller.CacheOptions(namespaces),
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		fmt.Fprintf(stderr, "airlock controller: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	if err := controller.Setup(mgr, controller.Options{AirlockImage: *airlockImage, AirlockImagePullPolicy: pull, WarmLifetime: *warm, Workers: *workers, PodSeccomp: sc, HostNetwork: *hostNetwork}); err != nil {
		fmt.Fprintf(stderr, "airlock controller: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	if *healthAddr != "0" {
		if err := mgr.AddHealthzCheck("ping", func(*http.Request) error { return nil }); err != nil {
			fmt.Fprintf(stderr, "airlock controller: %s\n", cli.ErrText(err))
			return cli.ExitFailed
		}
		if err := mgr.AddReadyzCheck("cache", func(r *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(r.Context()) {
				return errors.New("the cache has not synced")
			}
			return nil
		}); err != nil {
			fmt.Fprintf(stderr, "airlock controller: %s\n", cli.ErrText(err))
			return cli.ExitFailed
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("airlock controller: starting", "namespaces", strings.Join(namespaces, ","), "server", cfg.Host)
	if err := mgr.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "airlock controller: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	return cli.ExitOK
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, ",") }

func (m *multiFlag) Set(v string) error {
	if v == "" {
		return errors.New("empty")
	}
	*m = append(*m, v)
	return nil
}
