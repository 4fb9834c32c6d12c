package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock/internal/doctor"
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
	fs := newFlagSet("doctor", doctorSynopsis, stderr)
	asJSON := fs.Bool("json", false, "print the findings as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "airlock doctor: unexpected argument %q: doctor takes only --json\n", fs.Arg(0))
		return 2
	}
	rep := doctor.Run(probes)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "airlock doctor: write report: %v\n", err)
			return 2
		}
		return rep.ExitCode()
	}
	if err := rep.WriteText(stdout); err != nil {
		fmt.Fprintf(stderr, "airlock doctor: write report: %v\n", err)
		return 2
	}
	return rep.ExitCode()
}
