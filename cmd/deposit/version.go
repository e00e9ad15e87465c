package main

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/depositkit/deposit/dedup"
)

// versionCmd prints the module version this binary was built from and the
// store schema version it writes.
func versionCmd(_ context.Context, args []string, s streams) int {
	c := newCommand("version", "deposit version",
		"Print the version of deposit (from the build: \"(devel)\" when built from a checkout\nwithout version information) and the store schema version it writes.", "")
	pos, code, ok := c.parse(args, s)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(s, "takes no arguments")
	}
	fmt.Fprintf(s.stdout, "deposit %s\nstore schema version %d\n", moduleVersion(), dedup.SchemaVersion())
	return exitDone
}

// moduleVersion is the main module's version from the build information.
func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}
