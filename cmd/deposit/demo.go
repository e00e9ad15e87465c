package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/depositkit/deposit/repotest"
)

const demoAbout = `Runs a whole batch against an in-process reference repository with faults on
(connections dropped after the record was committed, 503 and 429 with
Retry-After, 500), running it again while items are unresolved, then replays
it, and prints the server's own counters: records, duplicates, and requests
during the replay. Everything happens in a temporary folder that is removed
at the end.`

// Demo parameters: a batch of demoLines lines, of which demoCopies repeat an
// earlier line with other member order and whitespace and demoVariants
// differ from an earlier line only in the ignored /submitted field.
const (
	demoLines    = 200
	demoCopies   = 15
	demoVariants = 15
	demoFaults   = "drop=0.15,503=0.08:retry-after=1,429=0.05:retry-after=1,500=0.05"
	demoRounds   = 6
)

func demoCmd(ctx context.Context, args []string, s streams) int {
	var seed int64
	c := newCommand("demo", "deposit demo [--seed N]", demoAbout, "")
	c.fs.Int64Var(&seed, "seed", 0, "seed of the faults and of the batch; 0 picks one from the clock")
	pos, code, ok := c.parse(args, s)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(s, "unexpected argument %q", pos[0])
	}
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000
	}
	dir, err := os.MkdirTemp("", "deposit-demo-")
	if err != nil {
		fmt.Fprintf(s.stderr, "deposit demo: %v\n", err)
		return exitStop
	}
	defer os.RemoveAll(dir)

	srv, err := repotest.NewServer(repotest.Config{Faults: demoFaults, Seed: seed, DuplicateIgnore: []string{"submitted"}})
	if err != nil {
		fmt.Fprintf(s.stderr, "deposit demo: %v\n", err)
		return exitStop
	}
	defer srv.Close()

	input := filepath.Join(dir, "batch.jsonl")
	distinct, err := writeDemoBatch(input, seed)
	if err != nil {
		fmt.Fprintf(s.stderr, "deposit demo: %v\n", err)
		return exitStop
	}
	w := s.stdout
	fmt.Fprintf(w, "deposit demo (seed %d)\n", seed)
	fmt.Fprintf(w, "server: reference repository at %s (put), faults %s\n", srv.URL, demoFaults)
	fmt.Fprintf(w, "batch:  %d lines, %d distinct payloads (%d lines repeat one with other member order, %d differ from one only in /submitted, which --ignore leaves out of the key)\n\n",
		demoLines, distinct, demoCopies, demoVariants)

	o := runOptions{
		endpoint: srv.URL, protocol: "put", db: filepath.Join(dir, "deposit.db"), concurrency: 8,
		form: "jcs", ignore: stringList{"/submitted"}, maxAttempts: 5, maxElapsed: time.Minute,
		maxLineBytes: defaultMaxLineBytes, input: input,
	}
	// The runs report on the demo's stdout, as `deposit run` would on stderr.
	rs := streams{stdin: s.stdin, stdout: io.Discard, stderr: w, getenv: func(string) string { return "" }}
	cmd := newCommand("demo", "", "", "")
	for round := 1; ; round++ {
		fmt.Fprintf(w, "$ deposit run --ignore /submitted --concurrency 8 batch.jsonl   # round %d\n", round)
		_, code := runBatch(ctx, o, rs, cmd)
		if code != exitUnresolved || round == demoRounds || ctx.Err() != nil {
			if code != exitDone {
				fmt.Fprintf(w, "deposit demo: the batch did not finish (exit status %d)\n", code)
				return code
			}
			break
		}
		fmt.Fprintf(w, "exit status 3: some outcomes unknown, running again (safe)\n\n")
	}
	before := srv.Stats()
	fmt.Fprintf(w, "\n$ deposit run --ignore /submitted --concurrency 8 batch.jsonl   # replay\n")
	sum, code := runBatch(ctx, o, rs, cmd)
	after := srv.Stats()

	fmt.Fprintf(w, "\nserver's own counters:\n")
	fmt.Fprintf(w, "  records                   %d  (distinct payloads in the batch: %d)\n", after.Records, distinct)
	fmt.Fprintf(w, "  duplicates                %d\n", after.Duplicates)
	fmt.Fprintf(w, "  requests in all           %d\n", after.Requests)
	fmt.Fprintf(w, "  requests during replay    %d\n", after.Requests-before.Requests)
	fmt.Fprintf(w, "  faults injected           %d%s\n", after.Faults, faultKinds(after.FaultsByKind))
	ok = code == exitDone && after.Records == int64(distinct) && after.Duplicates == 0 &&
		after.Requests == before.Requests && sum.Replayed == demoLines
	if !ok {
		fmt.Fprintf(w, "\nexactly once did NOT hold in this run: please report it with the seed %d\n", seed)
		return exitFailed
	}
	fmt.Fprintf(w, "\none record per distinct payload, no duplicates, and the replay sent no request.\n")
	return exitDone
}

// writeDemoBatch writes the demo's input and returns the number of distinct
// payloads (by key: /submitted ignored).
func writeDemoBatch(path string, seed int64) (int, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	rnd := rand.New(rand.NewPCG(uint64(seed), 7))
	distinct := demoLines - demoCopies - demoVariants
	type payload struct {
		Title     string   `json:"title"`
		Creators  []string `json:"creators"`
		Year      int      `json:"year"`
		Submitted string   `json:"submitted"`
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	made := make([]payload, 0, distinct)
	bw := bufio.NewWriter(f)
	for i := range demoLines {
		var line []byte
		switch {
		case i < distinct:
			p := payload{
				Title:     fmt.Sprintf("Survey of site %d", i+1),
				Creators:  []string{fmt.Sprintf("Researcher %d", rnd.IntN(50)+1)},
				Year:      2000 + rnd.IntN(26),
				Submitted: base.Add(time.Duration(i) * time.Minute).Format(time.RFC3339),
			}
			made = append(made, p)
			line, _ = json.Marshal(p)
		case i < distinct+demoCopies:
			// The same payload with other member order and whitespace.
			p := made[rnd.IntN(len(made))]
			line = fmt.Appendf(nil, `{ "year": %d, "submitted": %q, "creators": [%q], "title": %q }`,
				p.Year, p.Submitted, p.Creators[0], p.Title)
		default:
			// The same deposit submitted again later: only /submitted differs.
			p := made[rnd.IntN(len(made))]
			p.Submitted = base.Add(time.Duration(i) * time.Hour).Format(time.RFC3339)
			line, _ = json.Marshal(p)
		}
		bw.Write(line)
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	return distinct, f.Close()
}
