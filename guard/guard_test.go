package guard_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// newGuard builds a guard for spec; cfg.Policy is replaced.
func newGuard(t testing.TB, spec policy.Spec, cfg guard.Config) *guard.Guard {
	t.Helper()
	p, err := policy.New(spec)
	if err != nil {
		t.Fatalf("policy.New(%+v): %v", spec, err)
	}
	cfg.Policy = p
	g, err := guard.New(cfg)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	return g
}

// requireHostspec skips tests whose policies list net_hosts until
// policy/hostspec can parse them.
func requireHostspec(t testing.TB) {
	t.Helper()
	if _, err := hostspec.Parse("api.example.test"); err != nil {
		airtest.SkipOrFail(t, "policy/hostspec cannot parse net_hosts yet: %v", err)
	}
	if _, err := hostspec.NormalizeHost("api.example.test"); err != nil {
		airtest.SkipOrFail(t, "policy/hostspec cannot normalize hosts yet: %v", err)
	}
}

// recordingTransport records every request that reaches it and answers 200
// with body.
type recordingTransport struct {
	body string

	mu   sync.Mutex
	reqs []*http.Request // guarded by mu
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	rt.reqs = append(rt.reqs, r)
	rt.mu.Unlock()
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{},
		Body:       io.NopCloser(strings.NewReader(rt.body)),
		Request:    r,
	}, nil
}

func (rt *recordingTransport) calls() []*http.Request {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]*http.Request(nil), rt.reqs...)
}

// countingTool returns a ToolFunc that counts its calls.
func countingTool(n *atomic.Int64) guard.ToolFunc {
	return func(ctx context.Context, args map[string]any) (any, error) {
		n.Add(1)
		return args["x"], nil
	}
}

func mustRequest(t testing.TB, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatalf("http.NewRequest(%q): %v", url, err)
	}
	return req
}

// op is one capability exercised with fixed arguments.
type op struct {
	name string
	do   func(g *guard.Guard) error
}

// everyOp lists one call of each capability. Nothing it names is granted by
// the policies it is used with, except the tool "echo".
func everyOp(t testing.TB) []op {
	return []op{
		{"Read", func(g *guard.Guard) error { _, err := g.Read("/etc/passwd"); return err }},
		{"Write", func(g *guard.Guard) error { return g.Write("/etc/airlock-guard-test", []byte("x")) }},
		{"List", func(g *guard.Guard) error { _, err := g.List("/etc"); return err }},
		{"Remove", func(g *guard.Guard) error { return g.Remove("/etc/airlock-guard-test") }},
		{"Fetch", func(g *guard.Guard) error {
			resp, err := g.Fetch(mustRequest(t, "https://api.example.test/"))
			if err == nil {
				resp.Body.Close()
			}
			return err
		}},
		{"CallTool", func(g *guard.Guard) error { _, err := g.CallTool(context.Background(), "echo", nil); return err }},
	}
}

func TestNew(t *testing.T) {
	p, err := policy.New(policy.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     guard.Config
		wantErr bool
	}{
		{"no-policy", guard.Config{}, true},
		{"relative-cwd", guard.Config{Policy: p, Cwd: "work"}, true},
		{"nil-tool", guard.Config{Policy: p, Tools: map[string]guard.ToolFunc{"x": nil}}, true},
		{"minimal", guard.Config{Policy: p}, false},
		{"absolute-cwd", guard.Config{Policy: p, Cwd: "/work/../data"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := guard.New(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New(%+v) error = %v, want error %v", tt.cfg, err, tt.wantErr)
			}
			if err == nil && g.Meter() == nil {
				t.Errorf("New(%+v).Meter() = nil, want a meter", tt.cfg)
			}
		})
	}
}

func TestZeroGuardRefuses(t *testing.T) {
	var g guard.Guard
	for _, o := range everyOp(t) {
		t.Run(o.name, func(t *testing.T) {
			if err := o.do(&g); err == nil {
				t.Errorf("zero Guard %s = nil error, want a refusal", o.name)
			}
		})
	}
}

func TestDefaultDeny(t *testing.T) {
	rt := &recordingTransport{}
	var calls atomic.Int64
	rec := &audit.Recorder{}
	g := newGuard(t, policy.Spec{}, guard.Config{
		Transport: rt,
		Tools:     map[string]guard.ToolFunc{"echo": countingTool(&calls)},
		Audit:     rec,
	})
	for _, o := range everyOp(t) {
		t.Run(o.name, func(t *testing.T) {
			err := o.do(g)
			if !errors.Is(err, policy.ErrDenied) {
				t.Fatalf("%s with no grants = %v, want policy.ErrDenied", o.name, err)
			}
			var de *policy.DenyError
			if !errors.As(err, &de) {
				t.Fatalf("%s with no grants = %T, want *policy.DenyError", o.name, err)
			}
		})
	}
	if n := len(rt.calls()); n != 0 {
		t.Errorf("transport saw %d requests with no net_hosts, want 0", n)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("tool ran %d times with no allowed_tools, want 0", n)
	}
	if got, want := len(rec.Denials()), len(everyOp(t)); got != want {
		t.Errorf("audit recorded %d denials, want %d: %+v", got, want, rec.Events())
	}
	for _, e := range rec.Events() {
		if e.Kind != audit.Deny || e.Rule == "" || e.Target == "" || (e.Suggestion == "" && e.Hint == "") {
			t.Errorf("audit event %+v: want a Deny with Rule, Target and a Suggestion or Hint", e)
		}
	}
}

func TestCallTool(t *testing.T) {
	tests := []struct {
		name       string
		tool       string
		wantCalls  int64
		wantDenied bool
		wantNoTool bool
	}{
		{"granted-and-implemented", "echo", 1, false, false},
		{"implemented-not-granted", "rm", 0, true, false},
		{"granted-not-implemented", "python3", 0, false, true},
		{"neither", "curl", 0, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var echo, rm atomic.Int64
			rec := &audit.Recorder{}
			g := newGuard(t, policy.Spec{AllowedTools: []string{"echo", "python3"}}, guard.Config{
				Tools: map[string]guard.ToolFunc{"echo": countingTool(&echo), "rm": countingTool(&rm)},
				Audit: rec,
			})
			got, err := g.CallTool(context.Background(), tt.tool, map[string]any{"x": 42})
			if errors.Is(err, policy.ErrDenied) != tt.wantDenied {
				t.Fatalf("CallTool(%q) = %v, want denied %v", tt.tool, err, tt.wantDenied)
			}
			if errors.Is(err, guard.ErrNoTool) != tt.wantNoTool {
				t.Fatalf("CallTool(%q) = %v, want ErrNoTool %v", tt.tool, err, tt.wantNoTool)
			}
			if n := echo.Load() + rm.Load(); n != tt.wantCalls {
				t.Errorf("CallTool(%q) ran tools %d times, want %d", tt.tool, n, tt.wantCalls)
			}
			if tt.wantCalls == 1 && got != 42 {
				t.Errorf("CallTool(%q) = %v, want 42", tt.tool, got)
			}
			if tt.wantDenied {
				want := audit.Event{Kind: audit.Deny, Layer: audit.LayerTool, Op: "call", Target: tt.tool,
					Rule: "allowed_tools", Suggestion: `add "` + tt.tool + `" to allowed_tools`}
				requireEvent(t, rec, want)
			}
		})
	}
}

// requireEvent fails t unless rec holds an event whose Kind, Layer, Op,
// Target, Rule and (when set in want) Suggestion equal want's.
func requireEvent(t testing.TB, rec *audit.Recorder, want audit.Event) {
	t.Helper()
	for _, e := range rec.Events() {
		if e.Kind == want.Kind && e.Layer == want.Layer && e.Op == want.Op && e.Target == want.Target &&
			e.Rule == want.Rule && (want.Suggestion == "" || e.Suggestion == want.Suggestion) {
			if e.Message == "" || e.Time.IsZero() {
				t.Errorf("event %+v has no Message or Time", e)
			}
			return
		}
	}
	t.Errorf("no audit event matching %+v in %+v", want, rec.Events())
}

// requireExhausted fails t unless err is a *budget.ExhaustedError for limit.
func requireExhausted(t testing.TB, what string, err error, limit budget.Limit) {
	t.Helper()
	var ee *budget.ExhaustedError
	if !errors.As(err, &ee) || !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("%s = %v (%T), want *budget.ExhaustedError", what, err, err)
	}
	if ee.Limit != limit {
		t.Errorf("%s halted by %s, want %s", what, ee.Limit, limit)
	}
}

func TestMaxOpsHaltsEveryCapability(t *testing.T) {
	const maxOps = 3
	var calls atomic.Int64
	rt := &recordingTransport{}
	rec := &audit.Recorder{}
	g := newGuard(t, policy.Spec{AllowedTools: []string{"echo"}, Budget: budget.Limits{Ops: maxOps}}, guard.Config{
		Transport: rt,
		Tools:     map[string]guard.ToolFunc{"echo": countingTool(&calls)},
		Audit:     rec,
	})
	for i := range maxOps {
		if _, err := g.CallTool(context.Background(), "echo", nil); err != nil {
			t.Fatalf("CallTool #%d within max_ops = %v, want nil", i+1, err)
		}
	}
	for _, o := range everyOp(t) {
		t.Run(o.name, func(t *testing.T) {
			requireExhausted(t, o.name+" after max_ops", o.do(g), budget.MaxOps)
		})
	}
	if n := calls.Load(); n != maxOps {
		t.Errorf("tool ran %d times, want %d (none after the halt)", n, maxOps)
	}
	if n := len(rt.calls()); n != 0 {
		t.Errorf("transport saw %d requests after the halt, want 0", n)
	}
	var halts, denials int
	for _, e := range rec.Events() {
		switch e.Kind {
		case audit.Halt:
			halts++
		case audit.Deny:
			denials++
		default:
			continue
		}
		if e.Layer != audit.LayerBudget || e.Rule != string(budget.MaxOps) {
			t.Errorf("budget event %+v: want Layer budget, Rule max_ops", e)
		}
	}
	if halts != 1 || denials != len(everyOp(t))-1 {
		t.Errorf("audit has %d halts and %d denials, want 1 and %d", halts, denials, len(everyOp(t))-1)
	}
	if ops, _ := g.Meter().Usage(); ops != maxOps {
		t.Errorf("Meter().Usage() ops = %d, want %d", ops, maxOps)
	}
}

func TestMaxWallHaltsEveryCapability(t *testing.T) {
	clock := airtest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	var calls atomic.Int64
	g := newGuard(t, policy.Spec{AllowedTools: []string{"echo"}, Budget: budget.Limits{Wall: 10 * time.Second}}, guard.Config{
		Clock:     clock,
		Transport: &recordingTransport{},
		Tools:     map[string]guard.ToolFunc{"echo": countingTool(&calls)},
	})
	clock.Advance(9 * time.Second)
	if _, err := g.CallTool(context.Background(), "echo", nil); err != nil {
		t.Fatalf("CallTool before the deadline = %v, want nil", err)
	}
	clock.Advance(time.Second)
	for _, o := range everyOp(t) {
		t.Run(o.name, func(t *testing.T) {
			requireExhausted(t, o.name+" after max_wall", o.do(g), budget.MaxWall)
		})
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("tool ran %d times, want 1 (none after the deadline)", n)
	}
}

func TestSharedMeter(t *testing.T) {
	p, err := policy.New(policy.Spec{AllowedTools: []string{"echo"}, Budget: budget.Limits{Ops: 2}})
	if err != nil {
		t.Fatal(err)
	}
	m := budget.NewMeter(p.Budget(), nil)
	var calls atomic.Int64
	tools := map[string]guard.ToolFunc{"echo": countingTool(&calls)}
	var gs []*guard.Guard
	for range 2 {
		g, err := guard.New(guard.Config{Policy: p, Meter: m, Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	for i, g := range gs {
		if _, err := g.CallTool(context.Background(), "echo", nil); err != nil {
			t.Fatalf("guard %d CallTool = %v, want nil", i, err)
		}
	}
	for i, g := range gs {
		_, err := g.CallTool(context.Background(), "echo", nil)
		requireExhausted(t, "CallTool on guard "+string(rune('0'+i)), err, budget.MaxOps)
	}
}

func TestConcurrentOpsRespectMaxOps(t *testing.T) {
	const maxOps, workers, each = 100, 8, 50
	var calls atomic.Int64
	g := newGuard(t, policy.Spec{AllowedTools: []string{"echo"}, Budget: budget.Limits{Ops: maxOps}}, guard.Config{
		Tools: map[string]guard.ToolFunc{"echo": countingTool(&calls)},
		Audit: &audit.Recorder{},
	})
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range workers {
		wg.Go(func() {
			for range each {
				if _, err := g.CallTool(context.Background(), "echo", nil); err == nil {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != maxOps || calls.Load() != maxOps {
		t.Errorf("%d concurrent calls: %d succeeded and %d ran, want %d", workers*each, ok.Load(), calls.Load(), maxOps)
	}
}

func TestFetchDenied(t *testing.T) {
	requireHostspec(t)
	tests := []struct {
		name, url, host string
	}{
		{"scheme-file", "file:///etc/passwd", ""},
		{"scheme-ftp", "ftp://api.example.test/", ""},
		{"userinfo", "https://user:secret@api.example.test/", ""},
		{"userinfo-disguise", "https://api.example.test@evil.test/", ""},
		{"host-not-granted", "https://evil.test/", ""},
		{"suffix-confusion", "https://evilapi.example.test/", ""},
		{"prefix-confusion", "https://api.example.test.evil.test/", ""},
		{"port-not-granted", "https://api.example.test:8443/", ""},
		{"ip-not-listed", "http://127.0.0.2:8080/", ""},
		{"ip-wrong-port", "http://127.0.0.1:9090/", ""},
		{"ip-of-granted-name", "http://[::1]:8080/", ""},
		{"host-header-other-host", "https://api.example.test/", "evil.test"},
		{"host-header-other-port", "https://api.example.test/", "api.example.test:8443"},
		{"host-header-garbage", "https://api.example.test/", "api.example.test/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &recordingTransport{}
			rec := &audit.Recorder{}
			g := newGuard(t, policy.Spec{NetHosts: []string{"api.example.test", "127.0.0.1:8080"}}, guard.Config{Transport: rt, Audit: rec})
			req := mustRequest(t, tt.url)
			req.Host = tt.host
			resp, err := g.Fetch(req)
			if err == nil {
				resp.Body.Close()
			}
			if !errors.Is(err, policy.ErrDenied) {
				t.Fatalf("Fetch(%q, Host %q) = %v, want policy.ErrDenied", tt.url, tt.host, err)
			}
			if n := len(rt.calls()); n != 0 {
				t.Errorf("Fetch(%q) reached the transport %d times, want 0", tt.url, n)
			}
			d := rec.Denials()
			if len(d) != 1 || d[0].Layer != audit.LayerNet || d[0].Op != "fetch" || d[0].Rule != "net_hosts" || (d[0].Suggestion == "" && d[0].Hint == "") {
				t.Errorf("Fetch(%q) denials = %+v, want one net/fetch/net_hosts denial", tt.url, d)
			}
			if strings.Contains(d[0].Target, "secret") {
				t.Errorf("denial target %q leaks the URL password", d[0].Target)
			}
		})
	}
}

func TestFetchAllowed(t *testing.T) {
	requireHostspec(t)
	tests := []struct {
		name, url, host string
		wantURLHost     string // what the transport must be asked to dial
		wantTarget      string
	}{
		{"name", "https://api.example.test/v1", "", "api.example.test", "api.example.test:443"},
		{"name-case-and-dot", "https://API.Example.TEST./v1", "", "api.example.test", "api.example.test:443"},
		{"explicit-default-port", "http://api.example.test:80/", "", "api.example.test:80", "api.example.test:80"},
		{"host-header-same", "https://api.example.test/", "api.example.test:443", "api.example.test", "api.example.test:443"},
		{"ip-listed", "http://127.0.0.1:8080/", "", "127.0.0.1:8080", "127.0.0.1:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &recordingTransport{body: "ok"}
			rec := &audit.Recorder{}
			g := newGuard(t, policy.Spec{NetHosts: []string{"api.example.test", "127.0.0.1:8080"}}, guard.Config{Transport: rt, Audit: rec})
			req := mustRequest(t, tt.url)
			req.Host = tt.host
			origHost := req.URL.Host
			resp, err := g.Fetch(req)
			if err != nil {
				t.Fatalf("Fetch(%q) = %v, want nil", tt.url, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(body) != "ok" {
				t.Errorf("Fetch(%q) body = %q, %v, want \"ok\", nil", tt.url, body, err)
			}
			calls := rt.calls()
			if len(calls) != 1 {
				t.Fatalf("transport saw %d requests, want 1", len(calls))
			}
			if calls[0] == req {
				t.Errorf("the caller's request reached the transport, want a checked copy")
			}
			if got := calls[0].URL.Host; got != tt.wantURLHost || calls[0].Host != "" {
				t.Errorf("transport got URL host %q, Host %q, want %q and \"\"", got, calls[0].Host, tt.wantURLHost)
			}
			if req.URL.Host != origHost || req.Host != tt.host {
				t.Errorf("Fetch modified the caller's request: URL host %q, Host %q", req.URL.Host, req.Host)
			}
			requireEvent(t, rec, audit.Event{Kind: audit.Allow, Layer: audit.LayerNet, Op: "fetch", Target: tt.wantTarget, Rule: "net_hosts"})
		})
	}
}

func TestFetchWithoutTransport(t *testing.T) {
	requireHostspec(t)
	g := newGuard(t, policy.Spec{NetHosts: []string{"api.example.test"}}, guard.Config{})
	_, err := g.Fetch(mustRequest(t, "https://api.example.test/"))
	if err == nil || errors.Is(err, policy.ErrDenied) {
		t.Errorf("Fetch of a granted host with no Transport = %v, want a configuration error", err)
	}
	_, err = g.Fetch(mustRequest(t, "https://evil.test/"))
	if !errors.Is(err, policy.ErrDenied) {
		t.Errorf("Fetch of a denied host with no Transport = %v, want policy.ErrDenied", err)
	}
}

func TestFetchBodyOutputBudget(t *testing.T) {
	requireHostspec(t)
	rec := &audit.Recorder{}
	rt := &recordingTransport{body: strings.Repeat("x", 100)}
	g := newGuard(t, policy.Spec{NetHosts: []string{"api.example.test"}, Budget: budget.Limits{OutputBytes: 10}},
		guard.Config{Transport: rt, Audit: rec})
	resp, err := g.Fetch(mustRequest(t, "https://api.example.test/"))
	if err != nil {
		t.Fatalf("Fetch = %v, want nil", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	requireExhausted(t, "reading a 100-byte body with max_output_bytes 10", err, budget.MaxOutputBytes)
	if len(body) > 10 {
		t.Errorf("read %d body bytes, want at most 10", len(body))
	}
	requireEvent(t, rec, audit.Event{Kind: audit.Halt, Layer: audit.LayerBudget, Op: "fetch", Target: "api.example.test:443", Rule: "max_output_bytes"})
	_, err = g.Fetch(mustRequest(t, "https://api.example.test/"))
	requireExhausted(t, "Fetch after the output budget", err, budget.MaxOutputBytes)
	if n := len(rt.calls()); n != 1 {
		t.Errorf("transport saw %d requests, want 1", n)
	}
}

func BenchmarkCheckDenied(b *testing.B) {
	g := newGuard(b, policy.Spec{FSRead: []string{"/work"}, AllowedTools: []string{"echo"},
		Budget: budget.Limits{Ops: 1e9, Wall: 24 * time.Hour}}, guard.Config{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Read("/workshop/secret"); !errors.Is(err, policy.ErrDenied) {
			b.Fatalf("Read = %v, want denied", err)
		}
	}
}
