package k8s_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/export/k8s"
	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// fakeHost is a Debian-like merged-/usr host (as in plan's tests).
type fakeHost struct{}

func (fakeHost) Lstat(p string) (bool, bool, string, error) {
	links := map[string]string{"/bin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64"}
	if l, ok := links[p]; ok {
		return true, false, l, nil
	}
	switch p {
	case "/usr/lib", "/usr/lib64", "/etc/ssl":
		return true, true, "", nil
	}
	return false, false, "", nil
}

func (fakeHost) LookTool(name string) (string, string, error) {
	if name == "python3" {
		return "/usr/bin/python3", "/usr/bin/python3.11", nil
	}
	return "", "", errors.New("not found")
}

func (fakeHost) Loader() []string          { return []string{"/lib64/ld-linux-x86-64.so.2"} }
func (fakeHost) Env(string) (string, bool) { return "", false }

func exportFor(t *testing.T, s policy.Spec, o k8s.Options) *k8s.Manifests {
	t.Helper()
	p, err := policy.New(s)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(p, plan.Request{Argv: []string{"python3", "job.py"}}, fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	m, err := k8s.Export(pl, p, o)
	if err != nil {
		t.Fatalf("Export = %v", err)
	}
	return m
}

var fullSpec = policy.Spec{
	FSRead: []string{"/data"}, FSWrite: []string{"/data/out"}, NetHosts: []string{"pypi.org", "*.pythonhosted.org:443"},
	AllowedTools: []string{"python3"}, Env: []string{"MPLBACKEND=Agg"},
}

var cases = []struct {
	name string
	spec policy.Spec
	opts k8s.Options
}{
	{"full", fullSpec, k8s.Options{Name: "job-1", Namespace: "agents"}},
	{"pinned-proxy", fullSpec, k8s.Options{Name: "job-2", ProxyClusterIP: "10.96.0.50", NoRuntimeClass: true}},
	{"no-network", policy.Spec{FSRead: []string{"/data"}, AllowedTools: []string{"python3"}}, k8s.Options{}},
}

func TestExportGolden(t *testing.T) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			m := exportFor(t, tt.spec, tt.opts)
			y, err := m.YAML()
			if err != nil {
				t.Fatal(err)
			}
			airtest.Golden(t, tt.name+".yaml", y)
		})
	}
}

// decoded is the stream read back strictly into the API types.
type decoded struct {
	pods     []*corev1.Pod
	policies []*networkingv1.NetworkPolicy
	deps     []*appsv1.Deployment
	svcs     []*corev1.Service
	cms      []*corev1.ConfigMap
}

// decodeStrict splits the stream and decodes every document into the type
// its kind names, refusing unknown and duplicate fields.
func decodeStrict(t *testing.T, stream []byte) decoded {
	t.Helper()
	var d decoded
	for i, doc := range bytes.Split(stream, []byte("\n---\n")) {
		if i == 0 {
			continue // the comment header
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var obj any
		switch tm.APIVersion + "/" + tm.Kind {
		case "v1/Pod":
			o := new(corev1.Pod)
			d.pods, obj = append(d.pods, o), o
		case "networking.k8s.io/v1/NetworkPolicy":
			o := new(networkingv1.NetworkPolicy)
			d.policies, obj = append(d.policies, o), o
		case "apps/v1/Deployment":
			o := new(appsv1.Deployment)
			d.deps, obj = append(d.deps, o), o
		case "v1/Service":
			o := new(corev1.Service)
			d.svcs, obj = append(d.svcs, o), o
		case "v1/ConfigMap":
			o := new(corev1.ConfigMap)
			d.cms, obj = append(d.cms, o), o
		default:
			t.Fatalf("document %d: unexpected %s %s", i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("document %d (%s): strict decode: %v", i, tm.Kind, err)
		}
	}
	return d
}

func TestExportDecodesAndHoldsTogether(t *testing.T) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			m := exportFor(t, tt.spec, tt.opts)
			y, err := m.YAML()
			if err != nil {
				t.Fatal(err)
			}
			d := decodeStrict(t, y)
			if len(d.pods) != 1 {
				t.Fatalf("%d pods, want 1", len(d.pods))
			}
			if !bytes.HasSuffix(bytes.TrimSpace(y), []byte("status: {}")) || !strings.Contains(string(y[bytes.LastIndex(y, []byte("\n---\n")):]), "kind: Pod") {
				t.Error("the Pod is not the last document: it could start before its NetworkPolicy")
			}
			for _, msg := range validate(d, len(tt.spec.NetHosts) > 0) {
				t.Error(msg)
			}
			var sc specs.LinuxSeccomp
			dec := json.NewDecoder(bytes.NewReader(m.Seccomp))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&sc); err != nil {
				t.Fatalf("seccomp profile: %v", err)
			}
			want, err := oci.Seccomp(plan.DefaultSeccomp(), "amd64")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&sc, want) {
				t.Error("the Localhost seccomp profile differs from the OCI export's")
			}
		})
	}
}

func TestExportRefusals(t *testing.T) {
	p := policy.Default()
	pl, err := plan.Compile(p, plan.Request{Argv: []string{"python3"}, CommandIsGranted: true}, fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		opts k8s.Options
	}{
		{"uppercase-name", k8s.Options{Name: "Job"}},
		{"long-name", k8s.Options{Name: strings.Repeat("a", 51)}},
		{"bad-namespace", k8s.Options{Namespace: "a_b"}},
		{"bad-arch", k8s.Options{Arch: "mips"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if m, err := k8s.Export(pl, p, tt.opts); err == nil {
				t.Fatalf("Export(%+v) = %+v, want an error", tt.opts, m)
			}
		})
	}
}
