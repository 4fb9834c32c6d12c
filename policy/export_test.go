package policy

// Test hooks: the schema test compares these with schema/policy.schema.json.
var (
	TopKeys        = topKeys
	DowngradeNames = downgradeNames
)

// BudgetKeys returns the keys the budget mapping accepts.
func BudgetKeys() []string { return budgetKeyStrings() }
