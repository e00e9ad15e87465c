package main

import (
	"context"
	"os"
	"strings"
)

// The key of a payload is the same whatever its member order, whitespace or
// number spelling, and --ignore leaves volatile fields out of it: here it is
// the SHA-256 of {"title":"Survey","year":2026}.
func Example_key() {
	input := strings.NewReader(`{"title":"Survey","year":2026,"submitted":"2026-01-01T10:00:00Z"}

{ "year": 2026.0, "title": "Survey", "submitted": "2026-03-05T08:30:00Z" }
`)
	realMain(context.Background(), []string{"key", "--ignore", "/submitted", "-"}, input, os.Stdout, os.Stderr, os.Getenv)
	// Output:
	// 1	78f1fde98be73a2c2187db96855060c9b165c2bbd4b2b21b657b383d68f90e2e
	// 3	78f1fde98be73a2c2187db96855060c9b165c2bbd4b2b21b657b383d68f90e2e
}
