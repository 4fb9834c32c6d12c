package audit_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/audit"
)

func deny(layer, op, target, rule string) audit.Event {
	return audit.Event{Kind: audit.Deny, Layer: layer, Op: op, Target: target, Rule: rule, Message: "m " + target}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"short", "abc", 5, "abc"},
		{"exact", "abcde", 5, "abcde"},
		{"cut", "abcdefgh", 5, "abcde…[+3 bytes]"},
		{"rune-boundary", "ab€cd", 3, "ab…[+5 bytes]"}, // € is 3 bytes: never split
		{"empty-max", "abc", 0, "…[+3 bytes]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := audit.Truncate(tt.in, tt.max); got != tt.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
		})
	}
}

func TestDenialLogDeduplicates(t *testing.T) {
	var d audit.DenialLog
	d.Emit(deny("net", "connect", "a:443", "net_hosts"))
	d.Emit(audit.Event{Kind: audit.Allow, Layer: "net", Op: "connect", Target: "ok:443"})
	d.Emit(audit.Event{Kind: audit.Halt, Layer: "budget", Rule: "max_ops"})
	d.Emit(deny("net", "connect", "a:443", "net_hosts"))
	d.Emit(deny("net", "http", "a:443", "net_hosts")) // another op: distinct
	d.Emit(deny("fs", "open", "/etc/shadow", "fs_read"))
	d.Emit(deny("net", "connect", "a:443", "net_hosts"))
	s := d.Take()
	want := []struct {
		op, target string
		count      int64
	}{{"connect", "a:443", 3}, {"http", "a:443", 1}, {"open", "/etc/shadow", 1}}
	if len(s.Denials) != len(want) {
		t.Fatalf("Take() = %+v, want %d distinct denials", s.Denials, len(want))
	}
	for i, w := range want {
		if g := s.Denials[i]; g.Op != w.op || g.Target != w.target || g.Count != w.count {
			t.Errorf("Denials[%d] = %s %s ×%d, want %s %s ×%d", i, g.Op, g.Target, g.Count, w.op, w.target, w.count)
		}
	}
	if c := s.Counts; c.Total != 5 || c.Dropped != 0 || c.ByLayer["net"] != 4 || c.ByLayer["fs"] != 1 || len(c.ByLayer) != 2 {
		t.Errorf("Counts = %+v, want 5 in total: 4 net, 1 fs, none dropped", c)
	}
}

// TestDenialLogFlood: a flood of distinct denials with huge targets and
// messages keeps a bounded list and bounded fields, and counts everything.
func TestDenialLogFlood(t *testing.T) {
	d := audit.DenialLog{MaxDistinct: 10}
	huge := strings.Repeat("x", 1<<20)
	const n = 100_000
	for i := range n {
		e := deny("net", "connect", fmt.Sprintf("%d.%s", i, huge[:4096]), "net_hosts")
		if i%1000 == 0 {
			e.Message, e.Suggestion = huge, huge // one megabyte each
		}
		d.Emit(e)
	}
	// A denial already kept is counted on its tally, not dropped.
	d.Emit(deny("net", "connect", "0."+huge[:4096], "net_hosts"))
	s := d.Take()
	if len(s.Denials) != 10 {
		t.Fatalf("kept %d distinct denials, want 10", len(s.Denials))
	}
	var itemized int64
	for _, e := range s.Denials {
		itemized += e.Count
		if len(e.Target) > audit.MaxTargetBytes+20 || len(e.Message) > audit.MaxMessageBytes+20 || len(e.Suggestion) > audit.MaxSuggestionBytes+20 {
			t.Errorf("kept a denial with a %d-byte target, %d-byte message, %d-byte suggestion", len(e.Target), len(e.Message), len(e.Suggestion))
		}
		if !strings.Contains(e.Target, "…[+") {
			t.Errorf("target %.40q… was cut without a marker", e.Target)
		}
	}
	c := s.Counts
	if c.Total != n+1 || c.Dropped != n-10 || itemized != 11 || c.ByLayer["net"] != n+1 {
		t.Errorf("Counts = %+v with %d itemized, want %d in total, %d dropped, 11 itemized", c, itemized, n+1, n-10)
	}
}

// TestDenialLogKindsNotHidden: a spray of distinct targets fills the list,
// yet the first denial of every other kind is still itemized, up to
// MaxExtraKinds of them.
func TestDenialLogKindsNotHidden(t *testing.T) {
	d := audit.DenialLog{MaxDistinct: 5}
	for i := range 1000 {
		d.Emit(deny("net", "connect", fmt.Sprintf("spray-%d", i), "net_hosts"))
	}
	d.Emit(deny("net", "accept", "127.0.0.1:3128", "max_proxy_conns"))
	d.Emit(deny("net", "accept", "127.0.0.1:3128", "max_proxy_conns"))
	d.Emit(deny("net", "accept", "127.0.0.1:1080", "max_proxy_conns")) // same kind: dropped
	for i := range 2 * audit.MaxExtraKinds {
		d.Emit(deny("fs", fmt.Sprintf("op%d", i), "/x", "fs_read"))
	}
	s := d.Take()
	if len(s.Denials) != 5+audit.MaxExtraKinds {
		t.Fatalf("kept %d denials, want %d (MaxDistinct plus MaxExtraKinds)", len(s.Denials), 5+audit.MaxExtraKinds)
	}
	if g := s.Denials[5]; g.Rule != "max_proxy_conns" || g.Count != 2 {
		t.Errorf("Denials[5] = %+v, want the max_proxy_conns denial ×2 kept though the list was full", g)
	}
	if c := s.Counts; c.Total != 1003+2*audit.MaxExtraKinds || c.Dropped != 995+1+audit.MaxExtraKinds+1 {
		t.Errorf("Counts = %+v", c)
	}
}

// TestDenialLogTake: each Take returns only the denials since the previous
// one; Pending peeks without taking; Totals add up every stretch.
func TestDenialLogTake(t *testing.T) {
	d := audit.DenialLog{MaxDistinct: 2}
	d.Emit(deny("net", "connect", "a:443", "net_hosts"))
	d.Emit(deny("net", "connect", "b:443", "net_hosts"))
	d.Emit(deny("net", "connect", "c:443", "net_hosts")) // dropped
	if p := d.Pending(); len(p.Denials) != 2 || p.Counts.Total != 3 {
		t.Errorf("Pending() = %+v, want 2 kept of 3", p)
	}
	first := d.Take()
	if len(first.Denials) != 2 || first.Counts.Total != 3 || first.Counts.Dropped != 1 {
		t.Errorf("first Take() = %+v, want 2 kept, 3 counted, 1 dropped", first)
	}
	if p := d.Pending(); len(p.Denials) != 0 || p.Counts.Total != 0 {
		t.Errorf("Pending() after Take = %+v, want nothing", p)
	}
	// The new stretch has room again, and "a" is new to it.
	d.Emit(deny("net", "connect", "c:443", "net_hosts"))
	d.Emit(deny("net", "connect", "a:443", "net_hosts"))
	second := d.Take()
	if len(second.Denials) != 2 || second.Denials[0].Target != "c:443" || second.Counts.Total != 2 || second.Counts.Dropped != 0 {
		t.Errorf("second Take() = %+v, want c and a, 2 counted", second)
	}
	if tot := d.Totals(); tot.Total != 5 || tot.Dropped != 1 || tot.ByLayer["net"] != 5 {
		t.Errorf("Totals() = %+v, want 5 denials, 1 dropped", tot)
	}
	// Copies: changing what was returned changes nothing inside.
	tot := d.Totals()
	tot.ByLayer["net"] = 0
	if d.Totals().ByLayer["net"] != 5 {
		t.Error("Totals() shares its map with the log")
	}
	if s := d.Take(); s.Denials != nil || s.Counts.ByLayer != nil {
		t.Errorf("Take() of an empty stretch = %+v, want the zero Summary", s)
	}
}

// TestDenialLogLayers: the per-layer map cannot grow past its bound.
func TestDenialLogLayers(t *testing.T) {
	var d audit.DenialLog
	for i := range 100 {
		d.Emit(deny(fmt.Sprintf("layer%d", i), "op", "t", "r"))
	}
	if c := d.Totals(); len(c.ByLayer) > 16 || c.ByLayer["other"] == 0 || c.Total != 100 {
		t.Errorf("Totals() = %d layers, other %d, total %d; want at most 16 layers, the rest under other", len(c.ByLayer), c.ByLayer["other"], c.Total)
	}
}

func TestDenialLogConcurrent(t *testing.T) {
	var d audit.DenialLog
	var wg sync.WaitGroup
	var taken int64
	var mu sync.Mutex
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				d.Emit(deny("net", "connect", fmt.Sprintf("%d-%d", g, i%100), "net_hosts"))
				if i%250 == 0 {
					s := d.Take()
					mu.Lock()
					taken += s.Counts.Total
					mu.Unlock()
					_ = d.Pending()
				}
			}
		})
	}
	wg.Wait()
	taken += d.Take().Counts.Total
	if taken != 8000 || d.Totals().Total != 8000 {
		t.Errorf("taken %d, totals %d; want every one of 8000 denials taken exactly once", taken, d.Totals().Total)
	}
}
