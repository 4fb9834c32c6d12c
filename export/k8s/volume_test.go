package k8s_test

import (
	"path"
	"testing"

	"github.com/airlock-sandbox/airlock/export/k8s"
)

func TestParseVolume(t *testing.T) {
	tests := []struct {
		name, in string
		path     string
		want     k8s.Volume
		ok       bool
	}{
		{"claim", "/data=claim:agent-data", "/data", k8s.Volume{Claim: "agent-data"}, true},
		{"claim-dotted", "/srv/out=claim:out.v1", "/srv/out", k8s.Volume{Claim: "out.v1"}, true},
		{"image", "/opt/model=image", "/opt/model", k8s.Volume{Image: true}, true},
		{"new", "/out=new:1Gi", "/out", k8s.Volume{New: "1Gi"}, true},
		{"new-canonical", "/out=new:1024Mi", "/out", k8s.Volume{New: "1Gi"}, true},
		{"new-decimal", "/out=new:500M", "/out", k8s.Volume{New: "500M"}, true},
		{"new-zero", "/out=new:0", "", k8s.Volume{}, false},
		{"new-negative", "/out=new:-1Gi", "", k8s.Volume{}, false},
		{"new-empty", "/out=new:", "", k8s.Volume{}, false},
		{"new-words", "/out=new:big", "", k8s.Volume{}, false},
		{"path-with-equals", "/data/a=b=claim:c", "/data/a=b", k8s.Volume{Claim: "c"}, true},
		{"root", "/=image", "/", k8s.Volume{Image: true}, true},
		{"no-equals", "/data", "", k8s.Volume{}, false},
		{"relative", "data=claim:x", "", k8s.Volume{}, false},
		{"trailing-slash", "/data/=claim:x", "", k8s.Volume{}, false},
		{"dotdot", "/data/../etc=claim:x", "", k8s.Volume{}, false},
		{"empty-claim", "/data=claim:", "", k8s.Volume{}, false},
		{"uppercase-claim", "/data=claim:Data", "", k8s.Volume{}, false},
		{"unknown-source", "/data=hostPath:/data", "", k8s.Volume{}, false},
		{"empty-source", "/data=", "", k8s.Volume{}, false},
		{"emptydir", "/data=emptyDir", "", k8s.Volume{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, v, err := k8s.ParseVolume(tt.in)
			if (err == nil) != tt.ok || p != tt.path || v != tt.want {
				t.Errorf("ParseVolume(%q) = %q, %+v, %v; want %q, %+v, ok %v", tt.in, p, v, err, tt.path, tt.want, tt.ok)
			}
		})
	}
}

// FuzzParseVolume: ParseVolume never panics, accepts only absolute clean
// paths and a claim or the image, and round-trips through String.
func FuzzParseVolume(f *testing.F) {
	for _, s := range []string{"/data=claim:agent-data", "/a=b=image", "/=image", "/x=claim:", "x=image", "/d/=claim:a.b", "/o=new:1Gi", "/o=new:1.5e3Ki"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, v, err := k8s.ParseVolume(s)
		if err != nil {
			return
		}
		set := 0
		for _, b := range []bool{v.Claim != "", v.New != "", v.Image} {
			if b {
				set++
			}
		}
		if !path.IsAbs(p) || path.Clean(p) != p || set != 1 {
			t.Fatalf("ParseVolume(%q) = %q, %+v: not an absolute clean path with one of a claim, a new claim or the image", s, p, v)
		}
		p2, v2, err := k8s.ParseVolume(p + "=" + v.String())
		if err != nil || p2 != p || v2 != v {
			t.Fatalf("ParseVolume(%q) = %q, %+v, %v; want %q, %+v", p+"="+v.String(), p2, v2, err, p, v)
		}
	})
}
