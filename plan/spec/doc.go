// Package spec defines the plan as data: the types package plan compiles
// a policy into (Plan, Mount, Rule, Limits, Seccomp and the rest), their
// methods, the explanation `airlock explain` prints (Plan.String) and the
// binary form in which the plan travels to the sandbox's init
// (Plan.MarshalBinary, Plan.UnmarshalBinary).
//
// Use it through package plan, which names every type and constant here
// (plan.Plan is spec.Plan) and adds Compile and the plan's other
// transformations. The types live apart from the compiler so that the
// sandbox's init (internal/enforce/nsinit, cmd/airlock-init), which only
// decodes and applies a plan, does not link the policy parser: Go
// initializes every linked package before main, and the YAML parser, the
// regular expressions and the policy's own tables cost every sandbox start
// about 0.2 ms (airlock-init started and exited in 1.79 ms with them, 1.60
// ms without).
//
// It must not import package policy, policy/hostspec or anything that
// links a parser: only the standard library, internal/wire and the small
// leaves policy/budget, policy/downgrade and policy/protected.
// deps_test.go holds it to that.
package spec
