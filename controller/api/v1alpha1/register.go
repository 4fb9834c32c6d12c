package v1alpha1

import (
	"embed"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the API.
const (
	Group   = "airlock.dev"
	Version = "v1alpha1"
)

// GroupVersion is airlock.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// CRDs holds the CustomResourceDefinitions, one YAML file per kind:
// crd/airlock.dev_sandboxes.yaml and crd/airlock.dev_sandboxtemplates.yaml.
//
//go:embed crd/*.yaml
var CRDs embed.FS

// AddToScheme registers the API's kinds with s.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Sandbox{}, &SandboxList{}, &SandboxTemplate{}, &SandboxTemplateList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
