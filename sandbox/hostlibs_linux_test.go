package sandbox_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
)

// TestHostLibrariesThroughAlternatives imports numpy, pandas and
// matplotlib inside: on Debian numpy's BLAS is reached through a link
// into /etc/alternatives (libblas.so.3 -> /etc/alternatives/...), which
// the sandbox's own /etc must resolve, read-only, without anything else of
// the host's /etc.
func TestHostLibrariesThroughAlternatives(t *testing.T) {
	requireSandbox(t)
	airtest.RequireBinary(t, "/usr/bin/python3")
	if err := exec.Command("/usr/bin/python3", "-c", "import numpy, pandas, matplotlib").Run(); err != nil {
		airtest.SkipOrFail(t, "numpy, pandas and matplotlib do not import on this host (%v): apt-get install python3-numpy python3-pandas python3-matplotlib", err)
	}
	tr := newTree(t)
	rep := py(t, policy.Spec{FSWrite: []string{tr.out}, Env: []string{"MPLCONFIGDIR=/tmp"}}, `
import os, numpy, pandas, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
a = numpy.arange(6.0).reshape(2, 3)
print("dot", (a @ a.T).tolist())
df = pandas.DataFrame({"x": [1, 2, 3], "y": [2, 4, 8]})
plt.plot(df.x, df.y); plt.savefig("`+tr.out+`/chart.png")
print("chart", os.path.getsize("`+tr.out+`/chart.png") > 0)
try:
    open("/etc/shadow").read(); print("shadow READ")
except OSError as e:
    print("shadow denied", e.errno)
try:
    os.listdir("/etc/apt"); print("etc/apt LISTED")
except OSError as e:
    print("etc/apt denied", e.errno)
try:
    open("/etc/alternatives/x", "w"); print("alternatives WRITTEN")
except OSError as e:
    print("alternatives read-only", e.errno)
`)
	wantExit(t, rep, 0)
	for _, want := range []string{"dot [[5.0, 14.0], [14.0, 50.0]]", "chart True", "shadow denied", "etc/apt denied", "alternatives read-only"} {
		if !strings.Contains(rep.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, rep.Stdout, rep.Stderr)
		}
	}
}
