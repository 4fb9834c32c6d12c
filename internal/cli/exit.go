package cli

// Exit codes: one table for every subcommand of airlock and airlock-server.
//
// `airlock run` passes the command's own status through (0 to 255), so
// its own outcomes use the codes of env(1), timeout(1) and `docker run`,
// which programs rarely use for themselves; the sandbox reports 124, 126
// and 127 in the report's exit_code, and run exits with that. The other
// subcommands use the usual 1 and 2.
const (
	ExitOK     = 0
	ExitFailed = 1 // the subcommand could not do its job, or a check it ran failed
	ExitUsage  = 2 // bad flags or arguments: nothing was done

	ExitRunFailed = 125 // run: airlock refused (bad flags, bad policy) or failed; nothing was started
)
