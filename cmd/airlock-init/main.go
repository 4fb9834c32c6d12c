// Command airlock-init is the sandbox's init on its own: a small binary the
// supervisor re-executes instead of the whole airlock CLI when it sits next
// to it (same folder, same owner, not writable by others), so a sandbox
// starts without loading the CLI's HTTP, MCP and Kubernetes code. It imports
// only the init itself, which also holds the OCI launcher and the idle pid 1
// of an OCI container (one dispatch table, nsinit.Dispatch, shared with
// sandbox.Init). Without it, airlock re-executes its own binary.
package main

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/enforce/nsinit"
)

func main() {
	nsinit.Dispatch() // the init, the OCI launcher or its pause: never returns
	fmt.Fprintln(os.Stderr, "airlock-init: started by airlock, not by hand; keep it next to the airlock binary so sandboxes start faster")
	os.Exit(2)
}
