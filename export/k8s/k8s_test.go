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
	case "/data/in.csv", "/data/out.csv":
		return true, false, "", nil
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

// The images and claims the cases name: parameters, not objects of the
// export.
const (
	testImage = "registry.example/agent:1"
	dataClaim = "agent-data"
	outClaim  = "agent-out"
)

var claims = map[string]k8s.Volume{"/data": {Claim: dataClaim}, "/data/out": {Claim: outClaim}}

var cases = []struct {
	name string
	spec policy.Spec
	opts k8s.Options
}{
	{"full", fullSpec, k8s.Options{Name: "job-1", Namespace: "agents", Image: testImage, ProxyClusterIP: "10.96.0.40", Volumes: claims}},
	{"pinned-proxy", fullSpec, k8s.Options{Name: "job-2", Image: testImage, ProxyClusterIP: "10.96.0.50", NoRuntimeClass: true,
		Volumes: map[string]k8s.Volume{"/data": {Image: true}, "/data/out": {Claim: outClaim}}}},
	{"proxy-dns", fullSpec, k8s.Options{Name: "job-3", Namespace: "agents", Image: testImage, ProxyDNS: true, RuntimeClass: "kata", ServiceAccount: "agent", Volumes: claims}},
	{"no-network", policy.Spec{FSRead: []string{"/data"}, AllowedTools: []string{"python3"}}, k8s.Options{Image: testImage,
		Volumes: map[string]k8s.Volume{"/data": {Claim: dataClaim}}}},
	// The last case: refs_test.go's catches take it as the one with a
	// claim the export defines.
	{"new-claim", fullSpec, k8s.Options{Name: "job-4", Namespace: "agents", Image: testImage, ProxyClusterIP: "10.96.0.60",
		Volumes: map[string]k8s.Volume{"/data": {Claim: dataClaim}, "/data/out": {New: "1Gi"}}}},
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
	pvcs     []*corev1.PersistentVolumeClaim
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
		case "v1/PersistentVolumeClaim":
			o := new(corev1.PersistentVolumeClaim)
			d.pvcs, obj = append(d.pvcs, o), o
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
			for _, msg := range validate(d, len(tt.spec.NetHosts) > 0, tt.opts.ProxyDNS) {
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
	net := policy.Spec{NetHosts: []string{"pypi.org"}, AllowedTools: []string{"python3"}}
	readFile := policy.Spec{FSRead: []string{"/data/in.csv"}, AllowedTools: []string{"python3"}}
	writeFile := policy.Spec{FSWrite: []string{"/data/out.csv"}, AllowedTools: []string{"python3"}}
	for _, tt := range []struct {
		name string
		spec policy.Spec
		opts k8s.Options
		want string // in the error
	}{
		{"uppercase-name", policy.Spec{}, k8s.Options{Name: "Job", Image: testImage}, `name "Job"`},
		{"long-name", policy.Spec{}, k8s.Options{Name: strings.Repeat("a", 51), Image: testImage}, "use at most 50"},
		{"bad-namespace", policy.Spec{}, k8s.Options{Namespace: "a_b", Image: testImage}, `namespace "a_b"`},
		{"bad-arch", policy.Spec{}, k8s.Options{Arch: "mips", Image: testImage}, `architecture "mips"`},
		{"no-image", policy.Spec{}, k8s.Options{}, "no image for the sandbox: name one that holds /usr/bin/python3"},
		{"image-with-newline", policy.Spec{}, k8s.Options{Image: "x\nkind: Secret"}, `image "x\nkind: Secret"`},
		{"proxy-image-with-space", net, k8s.Options{Image: testImage, ProxyClusterIP: "10.96.0.50", ProxyImage: "a b"}, `image "a b"`},
		{"bad-runtime-class", policy.Spec{}, k8s.Options{Image: testImage, RuntimeClass: "G Visor"}, `runtime class "G Visor"`},
		{"bad-service-account", policy.Spec{}, k8s.Options{Image: testImage, ServiceAccount: "Agent"}, `service account "Agent"`},
		{"net-without-address", net, k8s.Options{Image: testImage}, "reaches the egress proxy only by address"},
		{"clusterip-and-dns", net, k8s.Options{Image: testImage, ProxyClusterIP: "10.96.0.50", ProxyDNS: true}, "exclude each other"},
		{"clusterip-not-an-ip", net, k8s.Options{Image: testImage, ProxyClusterIP: "proxy.example"}, `proxy clusterIP "proxy.example"`},
		{"clusterip-none", net, k8s.Options{Image: testImage, ProxyClusterIP: "None"}, `proxy clusterIP "None"`},
		{"clusterip-unspecified", net, k8s.Options{Image: testImage, ProxyClusterIP: "0.0.0.0"}, `proxy clusterIP "0.0.0.0"`},
		{"grant-without-volume", fullSpec, k8s.Options{Image: testImage, ProxyClusterIP: "10.96.0.50", Volumes: map[string]k8s.Volume{"/data": {Claim: dataClaim}}}, "fs_write grant /data/out has no volume: name the existing PersistentVolumeClaim that holds it (--volume /data/out=claim:NAME), or have the export define a new, empty one (--volume /data/out=new:SIZE)"},
		{"grant-zero-volume", fullSpec, k8s.Options{Image: testImage, ProxyClusterIP: "10.96.0.50", Volumes: map[string]k8s.Volume{"/data": {Claim: dataClaim}, "/data/out": {}}}, "fs_write grant /data/out has no volume"},
		{"write-from-image", fullSpec, k8s.Options{Image: testImage, ProxyClusterIP: "10.96.0.50", Volumes: map[string]k8s.Volume{"/data": {Image: true}, "/data/out": {Image: true}}}, "fs_write grant /data/out cannot come from the image"},
		{"claim-and-image", fullSpec, k8s.Options{Image: testImage, ProxyClusterIP: "10.96.0.50", Volumes: map[string]k8s.Volume{"/data": {Claim: dataClaim, Image: true}, "/data/out": {Claim: outClaim}}}, "not several"},
		{"volume-for-no-grant", policy.Spec{}, k8s.Options{Image: testImage, Volumes: map[string]k8s.Volume{"/data": {Claim: dataClaim}}}, `volume for "/data": the policy grants no fs_read or fs_write`},
		{"claim-for-a-written-file", writeFile, k8s.Options{Image: testImage, Volumes: map[string]k8s.Volume{"/data/out.csv": {Claim: outClaim}}}, "fs_write grant /data/out.csv is a file"},
		{"claim-for-a-read-file", readFile, k8s.Options{Image: testImage, Volumes: map[string]k8s.Volume{"/data/in.csv": {Claim: dataClaim}}}, "fs_read grant /data/in.csv is a file"},
		{"new-claim-for-a-read", fullSpec, k8s.Options{Image: testImage, ProxyClusterIP: "10.96.0.50", Volumes: map[string]k8s.Volume{"/data": {New: "1Gi"}, "/data/out": {Claim: outClaim}}}, "fs_read grant /data cannot be a new claim"},
		{"new-claim-for-a-written-file", writeFile, k8s.Options{Image: testImage, Volumes: map[string]k8s.Volume{"/data/out.csv": {New: "1Gi"}}}, "fs_write grant /data/out.csv is a file"},
		{"new-claim-bad-size", fullSpec, k8s.Options{Image: testImage, ProxyClusterIP: "10.96.0.50", Volumes: map[string]k8s.Volume{"/data": {Claim: dataClaim}, "/data/out": {New: "lots"}}}, `new claim size "lots"`},
		{"new-and-existing-claim", fullSpec, k8s.Options{Image: testImage, ProxyClusterIP: "10.96.0.50", Volumes: map[string]k8s.Volume{"/data": {Claim: dataClaim}, "/data/out": {Claim: outClaim, New: "1Gi"}}}, "not several"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.New(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			pl, err := plan.Compile(p, plan.Request{Argv: []string{"python3"}, CommandIsGranted: true}, fakeHost{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := k8s.Export(pl, p, tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Export(%+v) = %v, want an error saying %q", tt.opts, err, tt.want)
			}
		})
	}
}

// TestYAMLHeaderStaysComment: a header line that holds a newline (a grant
// path may) stays one comment line and adds no object to the stream.
func TestYAMLHeaderStaysComment(t *testing.T) {
	m := exportFor(t, cases[3].spec, cases[3].opts)
	m.Outside = append(m.Outside, "PersistentVolumeClaim x at /data/a\n---\nkind: Secret")
	y, err := m.YAML()
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := bytes.Cut(y, []byte("\n---\n"))
	for _, l := range strings.Split(string(header), "\n") {
		if !strings.HasPrefix(l, "#") {
			t.Errorf("header line %q is not a comment", l)
		}
	}
	if d := decodeStrict(t, y); len(d.pods) != 1 || len(d.policies) != 1 {
		t.Errorf("the stream holds %d pods and %d policies, want the export's 1 and 1", len(d.pods), len(d.policies))
	}
}
