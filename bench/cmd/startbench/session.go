package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// SessionResult is the latency of Exec into a warm session.
type SessionResult struct {
	Skipped  bool    `json:"skipped"`
	Note     string  `json:"note,omitempty"`
	CreateMS float64 `json:"new_session_ms,omitempty"`
	ExecMS   Summary `json:"exec_true_ms"`
	Failures int     `json:"failures"`
	// LibraryMS is a cold sandbox per run from a warm Go process
	// (sandbox.Cmd.Run of /usr/bin/true): the cost the API server and
	// library users pay, without the CLI's own start-up.
	LibraryMS Summary `json:"library_cold_true_ms"`
	// MicroVM is the same session under isolation microvm (QEMU's
	// microvm machine, TCG), fewer runs; nil when not measured.
	MicroVM *MicroVMSession `json:"microvm,omitempty"`
}

// MicroVMSession is a warm session's exec latency in a microVM.
type MicroVMSession struct {
	Note     string  `json:"note,omitempty"`
	CreateMS float64 `json:"new_session_ms,omitempty"`
	ExecMS   Summary `json:"exec_true_ms"`
	Failures int     `json:"failures"`
}

// microvmSession opens a session under isolation microvm and times n
// Execs of /usr/bin/true after two warm-up ones.
func microvmSession(ctx context.Context, n int) *MicroVMSession {
	p, err := policy.Parse([]byte("version: 1\nallowed_tools: [/usr/bin/true]\nbudget:\n  max_wall: 5m\n  max_ops: 100000\n"), policy.ParseOptions{})
	if err != nil {
		return &MicroVMSession{Note: "policy: " + err.Error()}
	}
	start := time.Now()
	s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p, Isolation: sandbox.IsolationMicroVM})
	if err != nil {
		return &MicroVMSession{Note: fmt.Sprintf("sandbox.NewSession: %v", err)}
	}
	defer s.Close()
	res := &MicroVMSession{CreateMS: ms(time.Since(start))}
	var xs []float64
	for i := -2; i < n; i++ {
		t := time.Now()
		rep, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"/usr/bin/true"}, Timeout: 30 * time.Second})
		d := time.Since(t)
		if err != nil || rep.ExitCode != 0 {
			res.Failures++
			if res.Note == "" {
				res.Note = fmt.Sprintf("Exec: err %v, report %+v", err, rep)
			}
			continue
		}
		if i >= 0 {
			xs = append(xs, ms(d))
		}
	}
	res.ExecMS = summarize(xs)
	return res
}

// sessionBench opens one session whose policy allows /usr/bin/true and
// times n Execs of it after a few warm-up ones.
func sessionBench(ctx context.Context, n int) SessionResult {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	p, err := policy.Parse([]byte("version: 1\nallowed_tools: [/usr/bin/true]\nbudget:\n  max_wall: 5m\n  max_ops: 100000\n"), policy.ParseOptions{})
	if err != nil {
		return SessionResult{Skipped: true, Note: "policy: " + err.Error()}
	}
	start := time.Now()
	s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p})
	if err != nil {
		log.Printf("session exec skipped: %v", err)
		return SessionResult{Skipped: true, Note: fmt.Sprintf("sandbox.NewSession: %v", err)}
	}
	defer s.Close()
	res := SessionResult{CreateMS: ms(time.Since(start))}
	var xs []float64
	for i := -5; i < n; i++ {
		t := time.Now()
		rep, err := s.Exec(ctx, sandbox.ExecRequest{Args: []string{"/usr/bin/true"}, Timeout: 10 * time.Second})
		d := time.Since(t)
		if err != nil || rep.ExitCode != 0 {
			res.Failures++
			if res.Note == "" {
				res.Note = fmt.Sprintf("Exec: err %v, report %+v", err, rep)
			}
			if res.Failures > 10 && len(xs) == 0 {
				break
			}
			continue
		}
		if i >= 0 {
			xs = append(xs, ms(d))
		}
	}
	res.ExecMS = summarize(xs)
	var lib []float64
	for i := -3; i < n; i++ {
		t := time.Now()
		rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: p}, Args: []string{"/usr/bin/true"}}).Run(ctx)
		d := time.Since(t)
		if err != nil || rep.ExitCode != 0 {
			res.Failures++
			continue
		}
		if i >= 0 {
			lib = append(lib, ms(d))
		}
	}
	res.LibraryMS = summarize(lib)
	res.MicroVM = microvmSession(ctx, max(10, n/10))
	return res
}
