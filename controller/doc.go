// Package controller is the airlock controller: it turns each Sandbox of
// airlock.dev/v1alpha1 into a Pod whose container runs `airlock run
// --isolation landlock` under the Sandbox's policy, and copies the run's
// outcome and airlock's report (cut to the Pod's termination message)
// into the Sandbox's status; and it keeps, for each SandboxTemplate, a
// pool of warm Pods that wait for a command and serve claims first.
//
// A policy is parsed and checked in full, for what a Pod can enforce,
// before any object is made for it: a policy that is only half valid
// never gets a Pod, and the Sandbox's Ready condition says what is wrong
// (reason InvalidPolicy). The enforcer comes from the operator's image
// (Options.AirlockImage): each Pod's init container copies airlock and
// writes the policy, which is in the Pod's own spec, into a volume that
// the sandbox container mounts read-only and runs airlock from (Install).
// Every Pod the controller makes has a controller ownerReference to its
// Sandbox or SandboxTemplate, so the garbage collector removes it with
// its owner, and a generated name.
//
// It is linked only into airlock-controller (deps_test.go): it imports
// controller-runtime and client-go, which neither airlock nor
// airlock-server links (they would slow every start of those).
// What it stops: a Pod that runs a command with more than its policy
// grants (the policy is enforced by airlock inside the Pod, whatever the
// cluster's network plugin does), a Pod created from a policy airlock
// would refuse, a warm Pod bound to two Sandboxes (a claim is one update
// of the Pod, refused on conflict), an enforcer or policy chosen by the
// Sandbox image's author or by another user of the namespace (no program
// of the image is run as airlock, its ENV does not reach airlock's
// runtime, and no object anyone else could make first is used), and a
// Pod bound or reported for a Sandbox whose spec is not what the
// controller builds for it: labels, annotations and owner references,
// which anyone who may update Pods can set, are never trusted alone.
package controller
