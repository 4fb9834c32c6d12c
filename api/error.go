package api

import "strconv"

// Error is the public error of the HTTP API: the body of every answer
// that is not a success is {"error": Error}. Everything in it is safe to
// show the client; host details and internal errors go to the server's
// log only. The Go client returns it as its error value, Status filled
// from the HTTP status.
type Error struct {
	// Status is the HTTP status, e.g. 403. It is not part of the JSON.
	Status int `json:"-"`
	// Code is the API's error code, e.g. "denied", "session_ended",
	// "bad_policy", "exceeds_ceiling".
	Code string `json:"code"`
	// Message is the public explanation: what was wrong and what to do.
	Message string `json:"message"`
	// Denial is set on 403 denied and budget_exhausted: the refused
	// operation, with no Count.
	Denial *Denial `json:"denial,omitempty"`
	// Problems is set on 400 bad_policy: every error of the policy.
	Problems []Problem `json:"problems,omitempty"`
	// Exceeds is set on 403 exceeds_ceiling: every grant of the policy
	// beyond the token's ceiling.
	Exceeds []Excess `json:"exceeds,omitempty"`
	// Operator is the policy change that would allow a 403 denied: the
	// operator's advice, sent only by a server started with
	// --agent-advice. Nil otherwise.
	Operator *Operator `json:"operator,omitempty"`
}

// Error renders e as "airlock api: 403 denied: message".
func (e *Error) Error() string {
	return "airlock api: " + strconv.Itoa(e.Status) + " " + e.Code + ": " + e.Message
}

// ErrorBody is the JSON body of an error answer.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Problem is one error in a policy, at 1-based Line and Col (zero, and
// absent from the JSON, when the problem has no position).
type Problem struct {
	Line    int    `json:"line,omitempty"`
	Col     int    `json:"col,omitempty"`
	Message string `json:"message"`
}

// Excess is one grant of a refused policy beyond the token's ceiling, in
// policy-file key order. Entry is the policy's own grant in canonical
// form; Reason never quotes the ceiling's paths, hosts or tools.
type Excess struct {
	Key    string `json:"key"`    // the policy key; budgets as budget.KEY
	Entry  string `json:"entry"`  // the grant: a path, host pattern, tool, variable name or budget value
	Reason string `json:"reason"` // why it is refused and what to do
}
