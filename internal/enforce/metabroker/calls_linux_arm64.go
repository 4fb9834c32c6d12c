package metabroker

// archCalls are the calls only this architecture has: none on arm64,
// which has only the at-forms.
var archCalls = map[int]call{}
