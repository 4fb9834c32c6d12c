package cli

// Version is the version airlock and airlock-server print, set at build
// time with -ldflags "-X github.com/airlock-sandbox/airlock/internal/cli.Version=...".
var Version = "dev"
