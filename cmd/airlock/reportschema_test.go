//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/mcp"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// schemaNode is the subset of JSON Schema 2020-12 that
// schema/report.schema.json uses.
type schemaNode struct {
	Ref                  string                 `json:"$ref"`
	Type                 any                    `json:"type"` // a name or a list of names
	Properties           map[string]*schemaNode `json:"properties"`
	Required             []string               `json:"required"`
	AdditionalProperties *bool                  `json:"additionalProperties"`
	Items                *schemaNode            `json:"items"`
	Enum                 []any                  `json:"enum"`
	OneOf                []*schemaNode          `json:"oneOf"`
	Minimum              *float64               `json:"minimum"`
	Maximum              *float64               `json:"maximum"`
	MinLength            *int                   `json:"minLength"`
	MaxItems             *int                   `json:"maxItems"`
	Defs                 map[string]*schemaNode `json:"$defs"`
	Schema               string                 `json:"$schema"`
}

func loadReportSchema(t *testing.T) *schemaNode {
	t.Helper()
	data, err := os.ReadFile("../../schema/report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s schemaNode
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("schema/report.schema.json is not valid JSON: %v", err)
	}
	return &s
}

// resolve follows a local $ref ("#/$defs/name").
func (root *schemaNode) resolve(n *schemaNode) *schemaNode {
	for n != nil && n.Ref != "" {
		n = root.Defs[strings.TrimPrefix(n.Ref, "#/$defs/")]
	}
	return n
}

// jsonFields returns the json names of t's fields and which are required
// (no omitempty).
func jsonFields(t reflect.Type) (names, required []string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		names = append(names, name)
		if !strings.Contains(opts, "omitempty") {
			required = append(required, name)
		}
	}
	sort.Strings(names)
	sort.Strings(required)
	return names, required
}

// TestReportSchemaMatchesType keeps the schema's properties equal to the
// json tags of sandbox.Report and its nested structs, and its required
// lists equal to the fields without omitempty.
func TestReportSchemaMatchesType(t *testing.T) {
	root := loadReportSchema(t)
	if root.Schema != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %q, want draft 2020-12", root.Schema)
	}
	var walk func(path string, typ reflect.Type, n *schemaNode)
	walk = func(path string, typ reflect.Type, n *schemaNode) {
		n = root.resolve(n)
		if n == nil {
			t.Errorf("%s: no schema for %s", path, typ)
			return
		}
		switch typ.Kind() {
		case reflect.Pointer:
			walk(path, typ.Elem(), n)
			return
		case reflect.Slice:
			if typ.Elem().Kind() == reflect.Struct {
				walk(path+"[]", typ.Elem(), n.Items)
			}
			return
		case reflect.Struct:
		default:
			return
		}
		names, required := jsonFields(typ)
		var props []string
		for k := range n.Properties {
			props = append(props, k)
		}
		sort.Strings(props)
		if !slices.Equal(props, names) {
			t.Errorf("%s: schema properties %v, want the json tags of %s: %v", path, props, typ, names)
		}
		req := slices.Clone(n.Required)
		sort.Strings(req)
		if !slices.Equal(req, required) {
			t.Errorf("%s: schema required %v, want the fields of %s without omitempty: %v", path, req, typ, required)
		}
		if n.AdditionalProperties == nil || *n.AdditionalProperties {
			t.Errorf("%s: additionalProperties is not false", path)
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if p, ok := n.Properties[name]; ok {
				walk(path+"."+name, f.Type, p)
			}
		}
	}
	walk("report", reflect.TypeFor[sandbox.Report](), root)

	// Enums mirror the Go constants.
	layers := []any{audit.LayerFS, audit.LayerNet, audit.LayerExec, audit.LayerBudget, audit.LayerKernel, audit.LayerTool}
	if got := root.Defs["denial"].Properties["layer"].Enum; !slices.Equal(got, layers) {
		t.Errorf("denial.layer enum = %v, want %v", got, layers)
	}
	if mi := root.Properties["denials"].MaxItems; mi == nil || *mi != audit.DefaultMaxDistinct+audit.MaxExtraKinds {
		t.Errorf("denials maxItems = %v, want audit.DefaultMaxDistinct+MaxExtraKinds (%d)", mi, audit.DefaultMaxDistinct+audit.MaxExtraKinds)
	}
	actions := []any{string(policy.ActionAdd), string(policy.ActionRemove), string(policy.ActionRaise)}
	if got := root.Defs["change"].Properties["action"].Enum; !slices.Equal(got, actions) {
		t.Errorf("change.action enum = %v, want %v", got, actions)
	}
	limits := []any{string(budget.MaxWall), string(budget.MaxOutputBytes), string(budget.MaxOps), string(budget.MaxMemory), string(budget.MaxCPU), string(budget.MaxPids), string(budget.MaxScratch), string(budget.MaxWrite), string(budget.Interrupted)}
	if got := root.Defs["limit"].Enum; !slices.Equal(got, limits) {
		t.Errorf("limit enum = %v, want %v", got, limits)
	}
}

// validate checks v (decoded with encoding/json into any) against n and
// returns one message per violation.
func (root *schemaNode) validate(path string, n *schemaNode, v any) []string {
	n = root.resolve(n)
	if n == nil {
		return []string{path + ": unresolved $ref"}
	}
	var bad []string
	if n.OneOf != nil {
		matches := 0
		for _, alt := range n.OneOf {
			if len(root.validate(path, alt, v)) == 0 {
				matches++
			}
		}
		if matches != 1 {
			bad = append(bad, fmt.Sprintf("%s: %v matches %d of oneOf, want 1", path, v, matches))
		}
	}
	if n.Type != nil && !typeMatches(n.Type, v) {
		bad = append(bad, fmt.Sprintf("%s: %v (%T) is not of type %v", path, v, v, n.Type))
	}
	if n.Enum != nil && !slices.Contains(n.Enum, v) {
		bad = append(bad, fmt.Sprintf("%s: %v is not one of %v", path, v, n.Enum))
	}
	switch v := v.(type) {
	case float64:
		if n.Minimum != nil && v < *n.Minimum || n.Maximum != nil && v > *n.Maximum {
			bad = append(bad, fmt.Sprintf("%s: %v out of range", path, v))
		}
	case string:
		if n.MinLength != nil && len(v) < *n.MinLength {
			bad = append(bad, fmt.Sprintf("%s: %q shorter than %d", path, v, *n.MinLength))
		}
	case []any:
		if n.MaxItems != nil && len(v) > *n.MaxItems {
			bad = append(bad, fmt.Sprintf("%s: %d items, more than %d", path, len(v), *n.MaxItems))
		}
		for i, e := range v {
			bad = append(bad, root.validate(fmt.Sprintf("%s[%d]", path, i), n.Items, e)...)
		}
	case map[string]any:
		for _, r := range n.Required {
			if _, ok := v[r]; !ok {
				bad = append(bad, path+": missing required "+r)
			}
		}
		for k, e := range v {
			p, ok := n.Properties[k]
			if !ok {
				if n.AdditionalProperties != nil && !*n.AdditionalProperties {
					bad = append(bad, path+": unexpected property "+k)
				}
				continue
			}
			bad = append(bad, root.validate(path+"."+k, p, e)...)
		}
	}
	return bad
}

func typeMatches(want any, v any) bool {
	var names []string
	switch w := want.(type) {
	case string:
		names = []string{w}
	case []any:
		for _, x := range w {
			names = append(names, fmt.Sprint(x))
		}
	}
	for _, name := range names {
		switch x := v.(type) {
		case nil:
			if name == "null" {
				return true
			}
		case bool:
			if name == "boolean" {
				return true
			}
		case float64:
			if name == "number" || name == "integer" && x == float64(int64(x)) {
				return true
			}
		case string:
			if name == "string" {
				return true
			}
		case []any:
			if name == "array" {
				return true
			}
		case map[string]any:
			if name == "object" {
				return true
			}
		}
	}
	return false
}

// TestReportSchemaValidatesRealReports runs airlock and validates the
// --json reports of a denial, a budget halt and a refusal.
func TestReportSchemaValidatesRealReports(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	airtest.RequireBinary(t, "/usr/bin/python3")
	root := loadReportSchema(t)
	tests := []struct {
		name     string
		args     []string
		wantCode int
	}{
		{"denied-egress", []string{"run", "--json", "--net-host", "pypi.org:443", "--", "python3", "-c",
			"import urllib.request\ntry: urllib.request.urlopen('http://127.0.0.1:9/', timeout=5)\nexcept Exception as e: print(e)"}, 0},
		{"halted", []string{"run", "--json", "--max-wall", "300ms", "--", "/bin/sh", "-c", "while :; do :; done"}, 124},
		{"exit-status", []string{"run", "--json", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, 3},
		{"refused-policy", []string{"run", "--json", "--max-wall", "1s", "--", "/nonexistent/command"}, 127},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := airlock(t, "", tt.args...)
			if r.code != tt.wantCode {
				t.Errorf("airlock %q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", tt.args, r.code, tt.wantCode, r.stdout, r.stderr)
			}
			var v any
			if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
				t.Fatalf("airlock %q: stdout is not JSON: %v\n%s", tt.args, err, r.stdout)
			}
			for _, msg := range root.validate("report", root, v) {
				t.Errorf("airlock %q report: %s\n%s", tt.args, msg, r.stdout)
			}
			if tt.name == "denied-egress" && !strings.Contains(r.stdout, `"rule": "net_hosts"`) {
				t.Errorf("airlock %q: report lists no net_hosts denial, so the schema's denial items went unchecked\n%s", tt.args, r.stdout)
			}
			if (tt.name == "denied-egress" || tt.name == "halted") && !strings.Contains(r.stdout, `"operator"`) {
				t.Errorf("airlock %q: report has no operator advice, so the schema's operator went unchecked\n%s", tt.args, r.stdout)
			}
		})
	}
	// And the validator itself rejects what the schema forbids.
	for _, bad := range []string{
		`{"exit_code": 0}`,
		strings.Replace(validReportJSON, `"halted_by": null`, `"halted_by": "max_coffee"`, 1),
		strings.Replace(validReportJSON, `"stdout": ""`, `"stdout": "", "extra": 1`, 1),
		strings.Replace(validReportJSON, `"exit_code": 0`, `"exit_code": 1.5`, 1),
		strings.Replace(validReportJSON, `"cpu_ms": 0`, `"cpu": 0`, 1),
		strings.Replace(validReportJSON, `"by_layer": {}`, `"by_layer": {"net": 0}`, 1),
		strings.Replace(validReportJSON, `"by_layer": {}`, `"by_layer": {"dns": 3}`, 1),
		strings.Replace(validReportJSON, `"denials": []`, `"denials": [`+strings.Repeat(`{"layer": "net", "op": "connect", "target": "t", "rule": "net_hosts", "message": "m", "count": 1},`, 66)+`{"layer": "net", "op": "connect", "target": "t", "rule": "net_hosts", "message": "m", "count": 1}]`, 1),
		strings.Replace(validReportJSON, `"denials": []`, `"denials": [{"layer": "net", "op": "connect", "target": "t", "rule": "net_hosts", "message": "m"}]`, 1),
	} {
		var v any
		if err := json.Unmarshal([]byte(bad), &v); err != nil {
			t.Fatal(err)
		}
		if len(root.validate("report", root, v)) == 0 {
			t.Errorf("schema accepts an invalid report: %s", bad)
		}
	}
	var v any
	if err := json.Unmarshal([]byte(validReportJSON), &v); err != nil {
		t.Fatal(err)
	}
	if msgs := root.validate("report", root, v); len(msgs) > 0 {
		t.Errorf("schema rejects a valid report: %v", msgs)
	}
}

const validReportJSON = `{"exit_code": 0, "signal": null, "halted_by": null, "duration_ms": 5, "stdout": "", "stderr": "",
 "stdout_truncated": false, "stderr_truncated": false,
 "usage": {"cpu_ms": 0, "max_memory_bytes": 0, "ops": 0, "output_bytes": 0, "write_bytes": 0},
 "denials": [], "denial_counts": {"total": 0, "by_layer": {}, "dropped": 0},
 "enforcement": {"namespaces": true, "landlock_abi": 7, "seccomp": true, "fs_denials": ""}}`

// TestReportCopiesMatchSandbox: the report types that client and mcp copy
// carry every field of sandbox.Report, the operator's advice included, so
// a report decoded and re-encoded there is the JSON the sandbox wrote.
func TestReportCopiesMatchSandbox(t *testing.T) {
	sig, halted := 9, "max_wall"
	in := sandbox.Report{
		ExitCode: 124, Signal: &sig, HaltedBy: &halted, DurationMS: 7, Stdout: "o", Stderr: "e",
		StdoutTruncated: true, StderrTruncated: true,
		Usage:        sandbox.Usage{CPUMS: 1, MaxMemoryBytes: 2, Ops: 3, OutputBytes: 4, WriteBytes: 5},
		Denials:      []sandbox.Denial{{Layer: "net", Op: "connect", Target: "evil.example:443", Rule: "net_hosts", Message: "m", Hint: "h", Count: 7}},
		DenialCounts: sandbox.DenialCounts{Total: 9, ByLayer: map[string]int64{"net": 9}, Dropped: 2},
		Error:        "err",
		Enforcement:  sandbox.Enforcement{Namespaces: true, Landlock: 7, Seccomp: true, Cgroup: "v1", Downgrades: []string{"max_cpu"}, FSDenials: "audit"},
		Writes:       &sandbox.Writes{Complete: true, Files: 1, Bytes: 2, Refused: []sandbox.WriteEntry{{Path: "/w/.envrc", Reason: "protected"}}, RefusedTotal: 1},
		Operator: &sandbox.Operator{Suggestions: []sandbox.OperatorSuggestion{
			{Layer: "net", Op: "connect", Target: "evil.example:443", Rule: "net_hosts", Suggestion: `add "evil.example:443" to net_hosts`,
				Changes: []policy.Change{{Action: policy.ActionAdd, Key: "net_hosts", Value: "evil.example:443"}}},
			{Layer: "budget", Rule: "max_wall", Suggestion: `raise max_wall to "1m"`, Changes: []policy.Change{{Action: policy.ActionRaise, Key: "max_wall", Value: "1m"}}},
		}},
	}
	want, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for name, copy := range map[string]any{"client.Report": &client.Report{}, "mcp.Report": &mcp.Report{}} {
		if err := json.Unmarshal(want, copy); err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(copy)
		if err != nil {
			t.Fatal(err)
		}
		var a, b map[string]any
		if err := json.Unmarshal(want, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s round trip:\n got %s\nwant %s", name, got, want)
		}
	}
}
