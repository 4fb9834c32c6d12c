package image

import (
	"flag"
	"os"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 0 {
		switch os.Args[0] {
		case ChildArg0:
			Child() // the re-executed unpack never returns
		case probeArg0:
			probeChild()
		case compromisedArg0, bloatArg0, fsizeArg0:
			compromisedChild()
		case hangArg0:
			for {
				time.Sleep(time.Hour) // never ends
			}
		}
	}
	if os.Getenv(noUserNSEnv) != "" {
		noUserNSChild()
	}
	// An exec of FuzzExtract works on the real file system and takes
	// milliseconds: the fuzzer's default minimizing (60 s per new input)
	// would leave no time to fuzz within CI's bound. 500 execs per
	// minimizing attempt, unless the flag is given.
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.fuzzminimizetime" })
	if !given {
		_ = flag.Set("test.fuzzminimizetime", "500x")
	}
	os.Exit(m.Run())
}

// eachMode runs fn once for each way the child confines itself, with
// Unpack made to use only that one.
func eachMode(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	for _, mode := range []string{modeNamespaces, modeLandlock} {
		t.Run(mode, func(t *testing.T) {
			if mode == modeNamespaces {
				airtest.RequireUserNS(t)
			} else {
				airtest.RequireLandlockABI(t, 4)
			}
			testMode = mode
			defer func() { testMode = "" }()
			fn(t)
		})
	}
}
