package doctor

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText prints r for a person: the checks, the verdict per layer of a
// default run, what would be refused, and a closing verdict line.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "host checks:")
	for _, c := range r.Checks {
		mark := "ok"
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, c.Name, c.Detail)
		if c.Consequence != "" {
			fmt.Fprintf(tw, "  \t\t-> %s\n", c.Consequence)
		}
	}
	fmt.Fprintln(tw, "\na default run here:")
	for _, l := range r.Layers {
		v := string(l.Verdict)
		if l.Verdict == Refused {
			v = "REFUSED (exit 125)"
			if l.Downgrade != "" {
				v += ", unless allow_downgrade: " + l.Downgrade
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", l.Name, v, l.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Refuses) > 0 {
		fmt.Fprintln(w, "\nairlock would refuse (exit 125):")
		for _, s := range r.Refuses {
			fmt.Fprintln(w, "  - "+s)
		}
	}
	var unavailable []string
	for _, l := range r.Layers {
		if l.Verdict == Unavailable {
			unavailable = append(unavailable, l.Name)
		}
	}
	verdict := "\nverdict: a default run is fully enforced here"
	if !r.Enforceable {
		verdict = "\nverdict: a default run CANNOT be fully enforced here"
	}
	if len(unavailable) > 0 {
		verdict += " (not available: " + strings.Join(unavailable, ", ") + ")"
	}
	_, err := fmt.Fprintln(w, verdict)
	return err
}
