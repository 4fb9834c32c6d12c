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
// (reason InvalidPolicy). Every object the controller makes has a
// controller ownerReference to its Sandbox or SandboxTemplate, so the
// garbage collector removes it with its owner.
//
// It is linked only into airlock-controller (deps_test.go): it imports
// controller-runtime and client-go, which neither airlock nor
// airlock-server links (they would slow every start of those).
// What it stops: a Pod that runs a command with more than its policy
// grants (the policy is enforced by airlock inside the Pod, whatever the
// cluster's network plugin does), a Pod created from a policy airlock
// would refuse, and a warm Pod bound to two Sandboxes (a claim is one
// update of the Pod, refused on conflict).
package controller
