package main

import "runtime/debug"

// gcPercent is the collector's target when GOGC is not set: a collection
// each time the heap has grown to five times what survived the last one.
// deposit's heap stays at a few MB whatever the input's length, so at Go's
// default of 100 the collector runs every 4 MB allocated, at a cost that
// does not shrink with the heap: about 110 times in a replay of 100,000
// lines, a fifth of its time. At 400 the heap peaks near 16 MB instead.
const gcPercent = 400

// tuneGC sets the collector's target to gcPercent unless GOGC sets one.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}
