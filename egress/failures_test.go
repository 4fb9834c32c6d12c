package egress_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/audit"
)

// TestUpstreamFailuresAudited: a granted destination that cannot be
// reached is not a denial. Each way it fails (the name has no address,
// every address refuses, the upstream connects and then gives no answer)
// is audited once as an Info event of its own op with the reason, which
// the report's egress_errors and the run's summary line are made of; the
// client gets a 502 naming the reason.
func TestUpstreamFailuresAudited(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	mute, err := net.Listen("tcp", "127.0.0.1:0") // accepts, then hangs up without a word
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mute.Close() })
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	mutePort := mute.Addr().(*net.TCPAddr).Port
	h := startProxy(t, harnessConfig{
		hosts: []string{"nowhere.test", fmt.Sprintf("down.test:%d", closedPort), fmt.Sprintf("mute.test:%d", mutePort),
			// a name resolving to loopback is reached only when its address is listed too
			fmt.Sprintf("127.0.0.1:%d", closedPort), fmt.Sprintf("127.0.0.1:%d", mutePort)},
		resolve: map[string]string{"down.test": "127.0.0.1", "mute.test": "127.0.0.1"},
	})
	cases := []struct {
		url, target, op, reason string
	}{
		{"http://nowhere.test/", "nowhere.test:80", audit.OpResolveFailed, "resolve nowhere.test"},
		{fmt.Sprintf("http://down.test:%d/", closedPort), fmt.Sprintf("down.test:%d", closedPort), audit.OpDialFailed, "refused"},
		{fmt.Sprintf("http://mute.test:%d/", mutePort), fmt.Sprintf("mute.test:%d", mutePort), audit.OpUpstreamFailed, ""}, // EOF or a reset, as the race goes
	}
	for _, c := range cases {
		resp, err := h.client(nil).Get(c.url)
		if err != nil {
			t.Fatalf("GET %s: %v", c.url, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("GET %s = %d, want 502", c.url, resp.StatusCode)
		}
		var got []audit.Event
		for _, e := range h.rec.Events() {
			if e.Target == c.target && audit.IsEgressFailure(e) {
				got = append(got, e)
			}
		}
		if len(got) != 1 || got[0].Op != c.op || got[0].Message == "" || !strings.Contains(got[0].Message, c.reason) {
			t.Errorf("%s: failure events %+v, want one %s naming %q", c.target, got, c.op, c.reason)
		}
		if d := h.denialFor(c.target); len(d) != 0 {
			t.Errorf("%s: a granted destination that failed was audited as a denial: %+v", c.target, d)
		}
	}
}
