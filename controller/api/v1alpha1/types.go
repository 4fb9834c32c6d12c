package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/api"
)

// Sandbox runs one command under an airlock policy in a Pod: the policy
// and image given inline, or those of a SandboxTemplate, whose warm Pods
// serve it first. Its spec is immutable; its status carries the run's
// outcome and airlock's report, cut to a summary.
type Sandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxSpec   `json:"spec"`
	Status SandboxStatus `json:"status,omitempty"`
}

// SandboxSpec is what to run and under which policy: exactly one of
// Policy (with Image) and TemplateRef.
type SandboxSpec struct {
	// Command is the program and its arguments, run by `airlock run`
	// inside the Pod. Required.
	Command []string `json:"command"`

	// Policy is the airlock policy file (YAML or JSON, as `airlock run
	// --policy` reads it). Relative paths are refused: there is no policy
	// folder in a Pod. Empty when TemplateRef is set.
	Policy string `json:"policy,omitempty"`

	// Image holds what the command needs: its files are the command's
	// environment. airlock does not come from it (the controller injects
	// the operator's). Required with Policy; empty with TemplateRef (the
	// template's).
	Image string `json:"image,omitempty"`

	// TemplateRef claims a Pod of a SandboxTemplate in the same
	// namespace: a ready warm one when there is one, a new one otherwise.
	// Nil when Policy is set.
	TemplateRef *TemplateRef `json:"templateRef,omitempty"`
}

// TemplateRef names a SandboxTemplate in the Sandbox's namespace.
type TemplateRef struct {
	Name string `json:"name"`
}

// Phase is where a Sandbox is in its life.
type Phase string

// Phases. Succeeded and Failed are final.
const (
	PhasePending   Phase = "Pending"   // accepted; its Pod is not running yet
	PhaseRunning   Phase = "Running"   // its Pod runs
	PhaseSucceeded Phase = "Succeeded" // the command exited 0
	PhaseFailed    Phase = "Failed"    // refused, exited non-zero, halted, or its Pod failed
)

// SandboxStatus is what the controller observed. The zero value is a
// Sandbox not yet seen.
type SandboxStatus struct {
	// Phase is empty until the controller first sees the Sandbox.
	Phase Phase `json:"phase,omitempty"`
	// PodName is the Pod that runs the command; empty before one is
	// bound, and when none ever will be (an invalid policy).
	PodName string `json:"podName,omitempty"`
	// Warm is true when PodName was a warm Pod of the template, ready
	// before the Sandbox was created; false for a Pod made for it.
	Warm bool `json:"warm,omitempty"`
	// PolicyDigest is "sha256:" and the hex SHA-256 of the policy text
	// the Pod runs under (the Sandbox's, or its template's when it was
	// bound), set with PodName.
	PolicyDigest string `json:"policyDigest,omitempty"`
	// PodDigest is the SHA-256 of what the controller checked in the
	// Pod's spec when it bound it (images, commands, environment,
	// volumes, security context, resources): a Pod changed since, or
	// replaced under the same name, is not reported.
	PodDigest string `json:"podDigest,omitempty"`
	// StartTime is when the Pod started, FinishTime when its command
	// ended; nil until then.
	StartTime  *metav1.Time `json:"startTime,omitempty"`
	FinishTime *metav1.Time `json:"finishTime,omitempty"`
	// ExitCode is airlock run's exit status (DESIGN §3: the command's,
	// 124 for a budget halt, 125 when airlock refused); nil until it
	// ended.
	ExitCode *int32 `json:"exitCode,omitempty"`
	// Report is airlock's report, cut to the Pod's 4096-byte termination
	// message (its truncated list names what was cut); nil when the Pod
	// ended without one.
	Report *api.Summary `json:"report,omitempty"`
	// Conditions: Ready (True, reason PodBound, once a Pod runs the
	// command; False with reason InvalidPolicy, TemplateNotFound,
	// PodLost or PodChanged and a message that says what is wrong) and,
	// when the Pod ended without a report, Reported=False saying why (no
	// termination message, one that is not airlock's summary, the
	// enforcer's installation failed, or the Pod's own reason, such as
	// DeadlineExceeded).
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SandboxList is a list of Sandboxes.
type SandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sandbox `json:"items"`
}

// SandboxTemplate is a policy and an image that Sandboxes claim by name,
// with a pool of warm Pods that wait, already started, for a command.
type SandboxTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxTemplateSpec   `json:"spec"`
	Status SandboxTemplateStatus `json:"status,omitempty"`
}

// SandboxTemplateSpec is the policy, image and warm pool of a template.
// The Pods' resources come from the policy's budget (max_memory, max_cpu
// over max_wall, max_scratch), so the policy is their one source.
type SandboxTemplateSpec struct {
	// Policy is the airlock policy file, as in SandboxSpec. Required.
	Policy string `json:"policy"`
	// Image is as in SandboxSpec: what the commands need, not airlock.
	// Required.
	Image string `json:"image"`
	// WarmPool is how many ready Pods wait for a claim; 0 means none
	// (every claim gets a new Pod).
	WarmPool int32 `json:"warmPool,omitempty"`
}

// SandboxTemplateStatus counts the warm pool.
type SandboxTemplateStatus struct {
	// Warm counts the unclaimed warm Pods, Ready those of them whose
	// container runs.
	Warm  int32 `json:"warm"`
	Ready int32 `json:"ready"`
	// Conditions: Ready (False with reason InvalidPolicy: no warm Pod is
	// made).
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SandboxTemplateList is a list of SandboxTemplates.
type SandboxTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxTemplate `json:"items"`
}
