package policy_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

const fullPolicy = `version: 1
fs_read: [./data, /etc/ssl/certs]
fs_write: [./out]
net_hosts:
  - api.github.com
  - "*.pythonhosted.org:443"
  - 127.0.0.1:8080
allowed_tools: [python3, /usr/bin/env]
env: [LANG, TZ=UTC, "EMPTY="]
budget:
  max_wall: 1h30m
  max_output_bytes: 1048577
  max_ops: 77
  max_memory: 1GB
  max_cpu: 1.5s
  max_pids: 9
  max_scratch: 64KiB
allow_downgrade: [landlock, fs_audit]
`

func TestMarshalJSON(t *testing.T) {
	p := mustParse(t, fullPolicy)
	got, err := p.MarshalJSON()
	if err != nil {
		t.Fatalf("MarshalJSON = %v", err)
	}
	want := `{"version":1,"fs_read":["/base/data","/etc/ssl/certs"],"fs_write":["/base/out"],` +
		`"net_hosts":["*.pythonhosted.org:443","127.0.0.1:8080","api.github.com"],` +
		`"allowed_tools":["/usr/bin/env","python3"],"env":["EMPTY=","LANG","TZ=UTC"],` +
		`"budget":{"max_wall":"1h30m","max_output_bytes":"1048577B","max_ops":77,"max_memory":"1GB","max_cpu":"1.5s","max_pids":9,"max_scratch":"64KiB","max_write":"256MiB"},` +
		`"allow_downgrade":["fs_audit","landlock"]}`
	if string(got) != want {
		t.Errorf("MarshalJSON =\n%s\nwant\n%s", got, want)
	}
}

func TestMarshalJSONMinimal(t *testing.T) {
	got, err := policy.Default().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":1,"budget":{"max_wall":"30s","max_output_bytes":"1MiB","max_ops":1000,"max_memory":"512MiB","max_cpu":"30s","max_pids":64,"max_scratch":"64MiB","max_write":"256MiB"}}`
	if string(got) != want {
		t.Errorf("Default().MarshalJSON() =\n%s\nwant\n%s", got, want)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	tests := []struct{ name, in string }{
		{"full", fullPolicy},
		{"minimal", "version: 1\n"},
		{"odd-durations", "version: 1\nbudget: {max_wall: 1h0m0.5s, max_cpu: 1500us}\n"},
		{"unicode", "version: 1\nfs_read: [\"/data/ü<&>\\\"x\"]\nenv: [\"A=é \\\\ '\"]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.in)
			js, err := p.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			q, err := policy.Parse(js, policy.ParseOptions{})
			if err != nil {
				t.Fatalf("Parse(MarshalJSON) = %v\n%s", err, js)
			}
			if !policy.Equal(p, q) {
				t.Errorf("Parse(MarshalJSON(p)) = %s, want %s", q.Summary(), p.Summary())
			}
		})
	}
}

func TestEqual(t *testing.T) {
	a := mustParse(t, fullPolicy)
	tests := []struct {
		name string
		b    *policy.Policy
		want bool
	}{
		{"same", mustParse(t, fullPolicy), true},
		{"reordered", mustParse(t, strings.Replace(fullPolicy, "[python3, /usr/bin/env]", "[/usr/bin/env, python3, python3]", 1)), true},
		{"other-tool", mustParse(t, strings.Replace(fullPolicy, "python3", "python", 1)), false},
		{"other-budget", mustParse(t, strings.Replace(fullPolicy, "max_ops: 77", "max_ops: 78", 1)), false},
		{"other-env-value", mustParse(t, strings.Replace(fullPolicy, "TZ=UTC", "TZ=CET", 1)), false},
		{"other-host", mustParse(t, strings.Replace(fullPolicy, "api.github.com", "github.com", 1)), false},
		{"no-downgrade", mustParse(t, strings.Replace(fullPolicy, "allow_downgrade: [landlock, fs_audit]", "", 1)), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := policy.Equal(a, tt.b); got != tt.want {
				t.Errorf("Equal(full, %s) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
	if !policy.Equal(nil, nil) {
		t.Errorf("Equal(nil, nil) = false, want true")
	}
	// Defaults written out are the same policy as defaults left out.
	if !policy.Equal(policy.Default(), mustParse(t, "version: 1\nbudget: {max_wall: 30s, max_ops: 1000}\n")) {
		t.Errorf("Equal(Default(), explicit defaults) = false, want true")
	}
}

func TestSummary(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"default", "version: 1\n", "ok: 0 fs_read, 0 fs_write, 0 net_hosts, 0 allowed_tools, 0 env; budget max_wall=30s max_output_bytes=1MiB max_ops=1000 max_memory=512MiB max_cpu=30s max_pids=64 max_scratch=64MiB max_write=256MiB"},
		{"full", fullPolicy, "ok: 2 fs_read, 1 fs_write, 3 net_hosts, 2 allowed_tools, 3 env; budget max_wall=1h30m max_output_bytes=1048577B max_ops=77 max_memory=1GB max_cpu=1.5s max_pids=9 max_scratch=64KiB max_write=256MiB; allow_downgrade fs_audit landlock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustParse(t, tt.in).Summary(); got != tt.want {
				t.Errorf("Summary() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestParseJSON checks that JSON input is read with the same strictness.
func TestParseJSON(t *testing.T) {
	ok := `{"version": 1, "fs_read": ["/data"], "budget": {"max_wall": "10s", "max_memory": 1048576, "max_ops": 5}}`
	p, err := policy.Parse([]byte(ok), policy.ParseOptions{})
	if err != nil {
		t.Fatalf("Parse(%s) = %v", ok, err)
	}
	if b := p.Budget(); b.Memory != 1<<20 || b.Ops != 5 || b.Wall.Seconds() != 10 {
		t.Errorf("Parse(%s).Budget() = %+v", ok, b)
	}
	tests := []struct {
		name      string
		in        string
		line, col int
		want      string
	}{
		{"duplicate-key", `{"version": 1, "version": 1}`, 1, 16, "duplicate key"},
		{"duplicate-nested", "{\"version\": 1,\n \"budget\": {\"max_ops\": 1, \"max_ops\": 2}}", 2, 27, "duplicate key"},
		{"null", `{"version": 1, "fs_read": null}`, 1, 27, "has no value"},
		{"null-entry", `{"version": 1, "fs_read": [null]}`, 1, 28, "got null"},
		{"unknown", `{"version": 1, "fs_reads": []}`, 1, 16, "did you mean"},
		{"version-string", `{"version": "1"}`, 1, 13, "must be the number 1"},
		{"number-entry", `{"version": 1, "allowed_tools": [1]}`, 1, 34, "got the number 1"},
		{"nul-escape", `{"version": 1, "fs_read": ["/a\u0000"]}`, 1, 28, "NUL byte"},
		{"bare-duration", `{"version": 1, "budget": {"max_wall": 30}}`, 1, 39, "has no unit"},
		{"trailing-garbage", `{"version": 1} {"version": 1}`, -1, 0, "not valid YAML or JSON"},
		{"empty-object", `{}`, 1, 1, "version is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pe := firstError(t, tt.in, policy.ParseOptions{})
			if tt.line == -1 {
				tt.line = pe.Line
			}
			if pe.Line != tt.line || pe.Col != tt.col || !strings.Contains(pe.Msg, tt.want) {
				t.Errorf("Parse(%s) = %d:%d: %s, want %d:%d: ...%s...", tt.in, pe.Line, pe.Col, pe.Msg, tt.line, tt.col, tt.want)
			}
		})
	}
}
