package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3"; when
// empty the module version is used, or "dev".
var version string

// ShortVersion returns the version alone, as agents report it.
func ShortVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi)
}

// versionOf returns -X main.version, else the main module's version in bi
// (nil: none), else "dev".
func versionOf(bi *debug.BuildInfo) string {
	if version != "" {
		return version
	}
	if bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// LongVersion adds what the build recorded of its source and toolchain.
func LongVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return describeBuild(bi)
}

// describeBuild says which version bi (nil: none) is, the commit it was
// built from (its full revision, "+modified" when the work tree had
// uncommitted changes, and the commit's time), the main module's path and
// version, and the Go version and platform.
func describeBuild(bi *debug.BuildInfo) string {
	rev, modified, at := "unknown", "", ""
	module := "unknown module"
	if bi != nil {
		module = bi.Main.Path
		if v := bi.Main.Version; v != "" {
			module += " " + v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = "+modified"
				}
			case "vcs.time":
				at = ", " + s.Value
			}
		}
	}
	return fmt.Sprintf("agentreach %s (commit %s%s%s; module %s; %s, %s/%s)", versionOf(bi), rev, modified, at,
		strings.TrimSpace(module), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func RunVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	cl := NewCmdline("version", "agentreach version", "Prints the version, the commit it was built from (revision, +modified when\n"+
		"the work tree had uncommitted changes, commit time), the module and the Go version.")
	if code, ok := cl.ParseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	fmt.Fprintln(stdout, LongVersion())
	return ExitOK
}
