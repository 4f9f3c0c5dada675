package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3"; when
// empty the module version is used, or "dev".
var version string

// shortVersion returns the version alone, as agents report it.
func shortVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// longVersion adds the VCS revision and the Go version.
func longVersion() string {
	rev, dirty := "unknown", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
				if len(rev) > 12 {
					rev = rev[:12]
				}
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
	}
	return fmt.Sprintf("agentreach %s (commit %s%s, %s, %s/%s)", shortVersion(), rev, dirty, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	cl := newCmdline("version", "agentreach version", "Prints the version, the commit it was built from and the Go version.")
	if code, ok := cl.parseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	fmt.Fprintln(stdout, longVersion())
	return exitOK
}
