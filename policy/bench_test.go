package policy_test

import (
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// benchPolicy is a policy of realistic size: a few path grants and a mix
// of exact, wildcard and address host patterns.
const benchPolicy = `version: 1
fs_read: [/work/data, /etc/ssl/certs, /usr/share/zoneinfo, ./models]
fs_write: [/work/out, /tmp/scratch]
net_hosts:
  - api.github.com
  - "*.pythonhosted.org:443"
  - pypi.org
  - "*.githubusercontent.com"
  - 10.0.0.0/8:5432
  - 127.0.0.1:8080
`

func parseBench(b *testing.B) *policy.Policy {
	b.Helper()
	p, err := policy.Parse([]byte(benchPolicy), policy.ParseOptions{BaseDir: "/base"})
	if err != nil {
		b.Fatalf("Parse(benchPolicy) = %v", err)
	}
	return p
}

// BenchmarkCheckHost measures the in-process net_hosts check: normalize,
// then match by name (granted wildcard, denied name) or by address.
func BenchmarkCheckHost(b *testing.B) {
	p := parseBench(b)
	cases := []struct {
		name, host string
		port       uint16
		allowed    bool
	}{
		{"wildcard-allowed", "files.pythonhosted.org", 443, true},
		{"mixed-case-trailing-dot", "API.GitHub.com.", 443, true},
		{"denied", "evil.example", 443, false},
		{"addr-allowed", "10.1.2.3", 5432, true},
		{"addr-denied", "169.254.169.254", 80, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := p.CheckHost(c.host, c.port); (err == nil) != c.allowed {
					b.Fatalf("CheckHost(%q, %d) = %v, want allowed=%v", c.host, c.port, err, c.allowed)
				}
			}
		})
	}
}

// BenchmarkCheckRead measures the in-process fs_read check: lexical
// canonicalization relative to cwd, then containment in each grant.
func BenchmarkCheckRead(b *testing.B) {
	p := parseBench(b)
	cases := []struct {
		name, cwd, path string
		allowed         bool
	}{
		{"absolute-allowed", "/", "/work/data/reports/q3.csv", true},
		{"relative-allowed", "/work/data", "reports/../q3.csv", true},
		{"write-grant", "/", "/work/out/chart.png", true},
		{"dotdot-escape", "/work/data", "../../etc/shadow", false},
		{"prefix-not-child", "/", "/work/database/x", false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := p.CheckRead(c.cwd, c.path); (err == nil) != c.allowed {
					b.Fatalf("CheckRead(%q, %q) = %v, want allowed=%v", c.cwd, c.path, err, c.allowed)
				}
			}
		})
	}
}
