package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// argvPoll is how often waitArgv looks at the file. The kubelet replaces
// a downward-API file atomically (a symlink swap), so a read sees either
// the old content or the new, never half of it.
const argvPoll = 50 * time.Millisecond

// maxArgvFile bounds the command the file may hold: an annotation, which
// the API server bounds at 256 KiB for all of a Pod's annotations.
const maxArgvFile = 256 << 10

// waitArgv waits until path holds a command, a JSON array of non-empty
// strings, and returns it; an empty or missing file means "not yet". It
// returns ctx's error when ctx ends first, and an error naming what is
// wrong when the file holds anything else: a warm Pod never guesses at a
// command.
func waitArgv(ctx context.Context, path string) ([]string, error) {
	t := time.NewTicker(argvPoll)
	defer t.Stop()
	for {
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if b = bytes.TrimSpace(b); len(b) > 0 {
			return parseArgv(path, b)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: no command was assigned: %w", path, context.Cause(ctx))
		case <-t.C:
		}
	}
}

func parseArgv(path string, b []byte) ([]string, error) {
	if len(b) > maxArgvFile {
		return nil, fmt.Errorf("%s: the command is %d bytes, over %d", path, len(b), maxArgvFile)
	}
	var argv []string
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&argv); err != nil || dec.More() {
		return nil, fmt.Errorf("%s: want the command as one JSON array of strings, such as [\"python3\",\"job.py\"]: %v", path, err)
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("%s: the command is empty", path)
	}
	return argv, nil
}

// writeSummary writes rep, cut to a Pod's termination message, to path.
func writeSummary(path string, rep *sandbox.Report) error {
	b, err := api.Summarize(rep, api.MaxTerminationMessage)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// refusalSummary writes to path (when not empty) the summary of a run
// airlock refused: exit 125 and why, so a Pod's status says it.
func refusalSummary(path string, err error) {
	if path == "" {
		return
	}
	// The refusal is already on stderr; a summary that cannot be written
	// leaves the termination message empty, which the controller reports.
	_ = writeSummary(path, &sandbox.Report{ExitCode: cli.ExitRunFailed, Error: cli.ErrText(err)})
}
