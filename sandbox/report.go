package sandbox

import (
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/denial"
)

// The report and everything in it are the wire types of package api,
// defined there once; these names keep library code that says
// sandbox.Report compiling.
type (
	// Report is the result of one run: what the agent gets back (DESIGN
	// §4). Its JSON form is the `--json` output, the API's and MCP's
	// result.
	Report = api.Report
	// Operator is the part of a report meant for the operator only.
	Operator = api.Operator
	// OperatorSuggestion is the policy change that would allow one denial
	// or halt of a run.
	OperatorSuggestion = api.OperatorSuggestion
	// Writes is what the copy back of a run's staged fs_write grants did.
	Writes = api.Writes
	// WriteEntry is one path the copy back refused or failed on.
	WriteEntry = api.WriteEntry
	// Usage is what the run consumed.
	Usage = api.Usage
	// Denial is one refused operation, naming the grant that would allow
	// it.
	Denial = api.Denial
	// DenialCounts counts every denial of a run, itemized in Denials or
	// not.
	DenialCounts = api.DenialCounts
	// Enforcement says which layers held during the run.
	Enforcement = api.Enforcement
	// EgressError is a granted destination the egress proxy could not
	// reach.
	EgressError = api.EgressError
)

// denialsFrom converts a DenialLog's summary to the report's form; the
// list is never nil.
func denialsFrom(s audit.Summary) ([]Denial, DenialCounts) {
	ds := make([]Denial, 0, len(s.Denials))
	for _, t := range s.Denials {
		d := denial.FromEvent(t.Event).Denial
		d.Count = t.Count
		ds = append(ds, d)
	}
	return ds, countsFrom(s.Counts)
}

// setDenials fills the report r's denials from a DenialLog's summary, and
// puts their suggestions first in Operator.
func setDenials(r *Report, s audit.Summary) {
	r.Denials, r.DenialCounts = denialsFrom(s)
	var ops []OperatorSuggestion
	for _, t := range s.Denials {
		if o, ok := operatorSuggestion(t.Event); ok {
			ops = append(ops, o)
		}
	}
	if len(ops) == 0 {
		return
	}
	if r.Operator == nil {
		r.Operator = &Operator{}
	}
	r.Operator.Suggestions = append(ops, r.Operator.Suggestions...)
}

// setEgressErrors fills the report r's egress errors from an
// EgressErrorLog's summary.
func setEgressErrors(r *Report, s audit.EgressErrors) {
	r.EgressErrors, r.EgressErrorsTotal = nil, s.Total
	for _, f := range s.Failures {
		r.EgressErrors = append(r.EgressErrors, EgressError{Op: f.Op, Target: f.Target, Message: f.Message, Count: f.Count})
	}
}

// addSuggestion appends the suggestion of a halt or denial event to the
// report r.
func addSuggestion(r *Report, e audit.Event) {
	if o, ok := operatorSuggestion(e); ok {
		if r.Operator == nil {
			r.Operator = &Operator{}
		}
		r.Operator.Suggestions = append(r.Operator.Suggestions, o)
	}
}

// operatorSuggestion reads the suggestion of e. A suggestion that does not
// parse (one cut by the denial log's bounds) is left out: it would not work.
func operatorSuggestion(e audit.Event) (OperatorSuggestion, bool) {
	r := denial.FromEvent(e)
	if r.Fix.IsZero() {
		return OperatorSuggestion{}, false
	}
	return denial.Suggestion(r.Denial, r.Fix), true
}

func countsFrom(c audit.Counts) DenialCounts {
	return DenialCounts{Total: c.Total, ByLayer: c.ByLayer, Dropped: c.Dropped}
}
