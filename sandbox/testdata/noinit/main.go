// Command noinit uses the sandbox library without calling sandbox.Init,
// for TestRunWithoutInit: the run must be refused with an error that names
// sandbox.Init, not fail somewhere in the sandbox's start.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func main() {
	rep, err := (&sandbox.Cmd{Config: sandbox.Config{Policy: policy.Default()}, Args: []string{"/bin/true"}, CommandIsGranted: true}).Run(context.Background())
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Printf("exit %d: %s\n", rep.ExitCode, rep.Error)
}
