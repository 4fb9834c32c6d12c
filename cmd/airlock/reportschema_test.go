//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// The schema's properties are checked against api.Report in package api
// (TestReportSchemaMatchesType); this file checks that what the binary
// prints is valid under it.

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
			"import urllib.request\ntry: urllib.request.urlopen('http://denied.example:9/', timeout=5)\nexcept Exception as e: print(e)"}, 0},
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
