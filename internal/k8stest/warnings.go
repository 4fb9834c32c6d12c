package k8stest

import (
	"slices"
	"sync"
)

// Warnings collects the warnings the API server sends (the Warning
// header, RFC 7234): deprecations, and what PodSecurity's warn level
// finds in a Pod or a workload's template. The zero value is ready.
type Warnings struct {
	mu   sync.Mutex
	list []string // guarded by mu
}

// HandleWarningHeader records one warning (rest.WarningHandler).
func (w *Warnings) HandleWarningHeader(code int, agent, text string) {
	if code != 299 || text == "" { // 299 "Miscellaneous persistent warning", the only code the API server sends
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// Take returns the warnings recorded since the last Take and forgets them.
func (w *Warnings) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := slices.Clone(w.list)
	w.list = nil
	return l
}
