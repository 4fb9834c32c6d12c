package sandbox_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// TestEgressErrorsInReport: a granted host that cannot be reached gives
// the program a 502; the report says why (egress_errors: the op, the
// target and the reason), and it is not a denial.
func TestEgressErrorsInReport(t *testing.T) {
	requireSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	target := fmt.Sprintf("host.airlock.internal:%d", port)
	rep := py(t, policy.Spec{NetHosts: []string{target}}, fmt.Sprintf(`
import urllib.request, urllib.error
for _ in range(2):
    try:
        urllib.request.urlopen("http://%s/", timeout=10)
        print("REACHED")
    except urllib.error.HTTPError as e:
        print("status", e.code)
`, target))
	wantExit(t, rep, 0)
	if strings.Count(rep.Stdout, "status 502") != 2 {
		t.Fatalf("stdout = %q, want two 502s\nstderr:\n%s", rep.Stdout, rep.Stderr)
	}
	if len(rep.Denials) != 0 {
		t.Errorf("a granted host that is down was reported as denied: %+v", rep.Denials)
	}
	if len(rep.EgressErrors) != 1 || rep.EgressErrorsTotal != 2 {
		t.Fatalf("egress_errors = %+v (total %d), want the one target failing twice", rep.EgressErrors, rep.EgressErrorsTotal)
	}
	e := rep.EgressErrors[0]
	if e.Op != "dial_failed" || e.Target != target || e.Count != 2 || !strings.Contains(e.Message, "refused") {
		t.Errorf("egress error = %+v, want dial_failed of %s twice, naming the refused connection", e, target)
	}
}
