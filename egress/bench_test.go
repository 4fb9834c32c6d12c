package egress_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy/budget"
)

// Run with: go test -run='^$' -bench='Direct|ViaProxy|ViaRelay|Decide' -benchtime=2000x ./egress/
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

// BenchmarkViaRelay is the floor under BenchmarkViaProxy: a relay that
// copies bytes both ways between the client and the target, dialed once
// the request head has arrived, as the proxy dials once it has decided,
// and that parses, decides and audits nothing. What it adds over
// BenchmarkDirect is the extra loopback hop each way (two more writes and
// wakeups per request, a dial and an accept per new connection), which
// any proxy pays.
func BenchmarkViaRelay(b *testing.B) {
	tg := newTarget(b, "allowed")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				head := make([]byte, 4<<10)
				n, err := c.Read(head)
				if err != nil {
					return
				}
				u, err := net.Dial("tcp", tg.hostPort("127.0.0.1"))
				if err != nil {
					return
				}
				defer u.Close()
				if _, err := u.Write(head[:n]); err != nil {
					return
				}
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, u)
			}()
		}
	}()
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			// The target answers the absolute-URI request it is relayed.
			tr := &http.Transport{
				Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: ln.Addr().String()}),
				DisableKeepAlives: !m.keepAlive,
			}
			defer tr.CloseIdleConnections()
			benchGet(b, &http.Client{Transport: tr}, "http://"+tg.hostPort("127.0.0.1")+"/")
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

// bulkSize is the body BenchmarkBulk* download: large enough that copying
// bytes, not per-request work, decides the time.
const bulkSize = 1 << 20

// newBulkTarget serves bulkSize bytes at every path, on loopback.
func newBulkTarget(b *testing.B) (hostPort func(host string) string) {
	body := make([]byte, bulkSize)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}))
	b.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	return func(host string) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
}

// BenchmarkBulkDirect and BenchmarkBulkViaProxy download a 1 MiB body on
// one keep-alive connection, directly and through the proxy: the proxy's
// byte throughput (MB/s), where BenchmarkViaProxy measures its added
// latency per small request.
func BenchmarkBulkDirect(b *testing.B) {
	hp := newBulkTarget(b)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	b.SetBytes(bulkSize)
	benchGet(b, &http.Client{Transport: tr}, "http://"+hp("127.0.0.1")+"/")
}

func BenchmarkBulkViaProxy(b *testing.B) {
	hp := newBulkTarget(b)
	h := startProxy(b, harnessConfig{
		hosts:   []string{hp("allowed.test"), hp("127.0.0.1")}, // the loopback address too: the guard refuses private addresses not granted
		resolve: map[string]string{"allowed.test": "127.0.0.1"},
		limits:  benchLimits,
	})
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: h.httpAddr})}
	defer tr.CloseIdleConnections()
	b.SetBytes(bulkSize)
	benchGet(b, &http.Client{Transport: tr}, "http://"+hp("allowed.test")+"/")
}
