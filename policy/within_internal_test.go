package policy

import (
	"reflect"
	"testing"

	"github.com/airlock-sandbox/airlock/policy/budget"
)

// TestWithinEveryBudget fails when a budget is added to budget.Limits but
// not to budgetKeys, limitValue or setLimit: Within (and LowerDefaults)
// iterate over budgetKeys, so a budget they do not know would be left
// unbounded by every ceiling.
func TestWithinEveryBudget(t *testing.T) {
	if n := reflect.TypeFor[budget.Limits]().NumField(); n != len(budgetKeys) {
		t.Fatalf("budget.Limits has %d fields but budgetKeys lists %d: add the new budget to budgetKeys, limitValue and setLimit", n, len(budgetKeys))
	}
	seen := map[string]bool{}
	for _, k := range budgetKeys {
		t.Run(string(k), func(t *testing.T) {
			def := limitValue(budget.Limits{}.WithDefaults(), k)
			if def < 2 {
				t.Fatalf("limitValue(defaults, %s) = %d: limitValue does not handle %s", k, def, k)
			}
			// Each key must be a field of its own.
			l := setLimit(budget.Limits{}, k, 1)
			for i := range reflect.ValueOf(l).NumField() {
				if f := reflect.ValueOf(l).Field(i); !f.IsZero() {
					name := reflect.TypeOf(l).Field(i).Name
					if seen[name] {
						t.Fatalf("setLimit(%s) sets field %s, which another key sets too", k, name)
					}
					seen[name] = true
				}
			}
			ceiling := Default()
			ceiling.limits = setLimit(ceiling.limits, k, def/2)
			err := Default().Within(ceiling)
			ce, ok := err.(*CeilingError)
			if !ok || len(ce.Excess) != 1 || ce.Excess[0].Key != "budget."+string(k) || ce.Excess[0].Entry != formatLimit(k, def) || ce.Excess[0].Max != formatLimit(k, def/2) {
				t.Fatalf("Default().Within(ceiling with %s lowered) = %v, want one excess budget.%s", k, err, k)
			}
			if low := Default().LowerDefaults(ceiling); limitValue(low.limits, k) != def/2 || low.Within(ceiling) != nil {
				t.Errorf("LowerDefaults did not lower %s to the ceiling's %d", k, def/2)
			}
		})
	}
	if len(seen) != len(budgetKeys) {
		t.Errorf("setLimit sets %d distinct fields for %d keys", len(seen), len(budgetKeys))
	}
}
