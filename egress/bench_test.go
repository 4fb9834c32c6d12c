package egress_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Run with: go test -run='^$' -bench='Direct|ViaProxy|Decide' -benchtime=2000x ./egress/
// Compare the minimums of interleaved runs (-count), see DESIGN.md §7.

var benchLimits = budget.Limits{Ops: 1 << 62, Wall: 1 << 62}

func benchGet(b *testing.B, c *http.Client, u string) {
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

var benchModes = []struct {
	name      string
	keepAlive bool
}{{"keepalive", true}, {"newconn", false}}

func BenchmarkDirect(b *testing.B) {
	tg := newTarget(b, "allowed")
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			tr := &http.Transport{DisableKeepAlives: !m.keepAlive}
			defer tr.CloseIdleConnections()
			benchGet(b, &http.Client{Transport: tr}, "http://"+tg.hostPort("127.0.0.1")+"/")
		})
	}
}

func BenchmarkViaProxy(b *testing.B) {
	tg := newTarget(b, "allowed")
	h := startProxy(b, harnessConfig{
		hosts:   []string{tg.hostPort("allowed.test"), tg.hostPort("127.0.0.1")},
		resolve: map[string]string{"allowed.test": "127.0.0.1"},
		limits:  benchLimits,
	})
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			tr := &http.Transport{
				Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: h.httpAddr}),
				DisableKeepAlives: !m.keepAlive,
			}
			defer tr.CloseIdleConnections()
			benchGet(b, &http.Client{Transport: tr}, "http://"+tg.hostPort("allowed.test")+"/")
		})
	}
}

func BenchmarkDecide(b *testing.B) {
	h := startProxy(b, harnessConfig{
		hosts:   []string{"allowed.test:443", "*.wild.test:443"},
		resolve: map[string]string{"allowed.test": "93.184.216.34"},
		limits:  benchLimits,
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.p.Decide(ctx, "allowed.test", 443); err != nil {
			b.Fatal(err)
		}
	}
}
