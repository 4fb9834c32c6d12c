package mcp

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// TestBudgetRefusalGivesNoAdvice: a file tool refused because max_ops ran
// out tells the agent what happened, not how to widen its policy: without
// Config.AgentAdvice neither the text nor the structured result says to
// raise the budget (the ExhaustedError's own text does).
func TestBudgetRefusalGivesNoAdvice(t *testing.T) {
	dir := t.TempDir()
	p := mustPolicy(t, policy.Spec{FSWrite: []string{dir}, Budget: budget.Limits{Ops: 1}})
	cs, _ := connect(t, newServer(t, Config{Policy: p}, (&fakes{}).new))
	call(t, cs, ToolListFiles, map[string]any{"path": dir}, nil) // the one op
	var out map[string]any
	res := call(t, cs, ToolListFiles, map[string]any{"path": dir}, &out)
	structured, _ := json.Marshal(out)
	if !res.IsError || !strings.Contains(text(res), "max_ops") {
		t.Fatalf("list_files past max_ops = isError %v %q, want a max_ops refusal", res.IsError, text(res))
	}
	for _, s := range []string{text(res), string(structured)} {
		if strings.Contains(s, "raise") || strings.Contains(s, "operator") {
			t.Errorf("the refusal tells the agent to widen its policy: %s", s)
		}
	}
}
