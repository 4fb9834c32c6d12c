package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/doctor"
	"github.com/airlock-sandbox/airlock/internal/termtext"
)

const doctorSynopsis = `airlock doctor [--json]

Probes this host (kernel, user namespaces, Landlock, seccomp, cgroups,
kernel audit, idmapped mounts) and says what a run with the default policy
enforces here, layer by layer, and what airlock would refuse (exit 125).
Exits 0 when a default run is fully enforced, 1 when it is not.`

func cmdDoctor(args []string, stdout, stderr io.Writer) int {
	return doctorWith(doctor.Probes{}, args, stdout, stderr)
}

// doctorWith is cmdDoctor with the probes given; tests fake them.
func doctorWith(probes doctor.Probes, args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("doctor", doctorSynopsis, stderr)
	asJSON := fs.Bool("json", false, "print the findings as JSON")
	if err := cli.Parse(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h and --help print the usage and succeed
		}
		return cli.ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "airlock doctor: unexpected argument %q: doctor takes only --json\n", fs.Arg(0))
		return cli.ExitUsage
	}
	rep := doctor.Run(probes)
	if *asJSON {
		if err := cli.WriteJSON(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "airlock doctor: write report: %s\n", cli.ErrText(err))
			return cli.ExitFailed
		}
		return rep.ExitCode()
	}
	// Escaped field by field so the columns stay aligned, and the whole
	// text once more for whatever a later field adds.
	var text strings.Builder
	if err := escapeDoctor(rep).WriteText(&text); err != nil {
		fmt.Fprintf(stderr, "airlock doctor: write report: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	if _, err := io.WriteString(stdout, termtext.Lines(text.String(), termtext.LineMax)); err != nil {
		fmt.Fprintf(stderr, "airlock doctor: write report: %s\n", cli.ErrText(err))
		return cli.ExitFailed
	}
	return rep.ExitCode()
}

// escapeDoctor returns a copy of rep whose texts are escaped for a
// terminal: the probes quote what the host says (a kernel release, an
// error naming a host path).
func escapeDoctor(rep doctor.Report) *doctor.Report {
	f := termtext.Field
	out := rep
	out.Checks = append([]doctor.Check(nil), rep.Checks...)
	for i, c := range out.Checks {
		out.Checks[i].Name, out.Checks[i].Detail, out.Checks[i].Consequence = f(c.Name), f(c.Detail), f(c.Consequence)
	}
	out.Layers = append([]doctor.Layer(nil), rep.Layers...)
	for i, l := range out.Layers {
		out.Layers[i].Name, out.Layers[i].Detail, out.Layers[i].Downgrade = f(l.Name), f(l.Detail), f(l.Downgrade)
		out.Layers[i].Verdict = doctor.Verdict(f(string(l.Verdict)))
	}
	out.Refuses = make([]string, len(rep.Refuses))
	for i, s := range rep.Refuses {
		out.Refuses[i] = f(s)
	}
	return &out
}
