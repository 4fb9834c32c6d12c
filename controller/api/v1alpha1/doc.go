// Package v1alpha1 holds the airlock.dev/v1alpha1 API that the airlock
// controller serves: Sandbox (one command under a policy, in a Pod) and
// SandboxTemplate (a policy and image with a warm pool), their deep
// copies and scheme registration, and the CustomResourceDefinitions
// (crd/*.yaml, embedded as CRDs) that a cluster installs for them. A test
// checks that the CRDs' schemas and these Go types name the same fields
// with the same types, so neither drifts from the other.
//
// It imports only the standard library, apimachinery and airlock's api
// package (the report summary); the controller itself is in package
// controller.
package v1alpha1
