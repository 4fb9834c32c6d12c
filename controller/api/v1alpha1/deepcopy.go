package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/airlock-sandbox/airlock/api"
)

// Deep copies, written by hand (TestDeepCopy fills every field by
// reflection and checks that a copy shares no memory with its original,
// so a field added without its copy fails there).

// DeepCopyInto copies s into out.
func (s *Sandbox) DeepCopyInto(out *Sandbox) {
	*out = *s
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Command = slices.Clone(s.Spec.Command)
	if s.Spec.TemplateRef != nil {
		r := *s.Spec.TemplateRef
		out.Spec.TemplateRef = &r
	}
	s.Status.deepCopyInto(&out.Status)
}

func (st *SandboxStatus) deepCopyInto(out *SandboxStatus) {
	*out = *st
	out.StartTime = st.StartTime.DeepCopy()
	out.FinishTime = st.FinishTime.DeepCopy()
	if st.ExitCode != nil {
		c := *st.ExitCode
		out.ExitCode = &c
	}
	out.Report = copySummary(st.Report)
	out.Conditions = copyConditions(st.Conditions)
}

// DeepCopy returns a copy of s.
func (s *Sandbox) DeepCopy() *Sandbox {
	if s == nil {
		return nil
	}
	out := new(Sandbox)
	s.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (s *Sandbox) DeepCopyObject() runtime.Object { return s.DeepCopy() }

// DeepCopyInto copies l into out.
func (l *SandboxList) DeepCopyInto(out *SandboxList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Sandbox, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (l *SandboxList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := new(SandboxList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies t into out.
func (t *SandboxTemplate) DeepCopyInto(out *SandboxTemplate) {
	*out = *t
	t.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Conditions = copyConditions(t.Status.Conditions)
}

// DeepCopy returns a copy of t.
func (t *SandboxTemplate) DeepCopy() *SandboxTemplate {
	if t == nil {
		return nil
	}
	out := new(SandboxTemplate)
	t.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (t *SandboxTemplate) DeepCopyObject() runtime.Object { return t.DeepCopy() }

// DeepCopyInto copies l into out.
func (l *SandboxTemplateList) DeepCopyInto(out *SandboxTemplateList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]SandboxTemplate, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (l *SandboxTemplateList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := new(SandboxTemplateList)
	l.DeepCopyInto(out)
	return out
}

func copyConditions(cs []metav1.Condition) []metav1.Condition {
	if cs == nil {
		return nil
	}
	out := make([]metav1.Condition, len(cs))
	for i := range cs {
		cs[i].DeepCopyInto(&out[i])
	}
	return out
}

func copySummary(s *api.Summary) *api.Summary {
	if s == nil {
		return nil
	}
	out := *s
	if s.Signal != nil {
		sig := *s.Signal
		out.Signal = &sig
	}
	out.Denials = slices.Clone(s.Denials)
	out.Truncated = slices.Clone(s.Truncated)
	return &out
}
