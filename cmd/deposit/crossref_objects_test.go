package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/repotest"
)

// The chaos test of issue 42 for Crossref against its stub, in the shape
// of the DataCite one: 300 works (each DOI an object of its own, no flag)
// in three inputs (v1; v2 with 30% changed; v3 with 30% changed again),
// every file regenerated with a new batch id for each input and stamped
// with the timestamp of its work's last change, by real processes
// SIGKILLed at uploads that took effect, behind faults on uploads, result
// downloads and queries, each batch run again until it exits 0.

// crTimestamp is the <timestamp> of a work's version v: the clock of the
// change that made it.
func crTimestamp(v int) uint64 { return 20260001000000000 + uint64(v)*100000000000 }

// crLine is work i at version v, inline, generated for input f.
func crLine(i, v, f int) []byte {
	doi := fmt.Sprintf("10.5555/reef-%03d", i)
	x := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<doi_batch version="5.3.1" xmlns="http://www.crossref.org/schema/5.3.1">
<head><doi_batch_id>input-%d-%03d</doi_batch_id><timestamp>%d</timestamp>
<depositor><depositor_name>Lab</depositor_name><email_address>lab@example.org</email_address></depositor><registrant>Lab</registrant></head>
<body><database><database_metadata><titles><title>Reef</title></titles></database_metadata>
<dataset><titles><title>Reef %d, version %d</title></titles>
<doi_data><doi>%s</doi><resource>https://example.org/reef/%d</resource></doi_data></dataset></database></body>
</doi_batch>
`, f, i, crTimestamp(v), i, v, doi, i)
	b, _ := json.Marshal(map[string]string{"doi": doi, "xml": x})
	return b
}

func crPayloads(in objectInputs, f int) [][]byte {
	out := make([][]byte, objectCount)
	for i := range out {
		out[i] = crLine(i, in.version(i, f), f)
	}
	return out
}

// crHolds checks that the stub holds one record per work, at the
// timestamp of its version in input f, with one version per change.
func crHolds(s *repotest.Crossref, in objectInputs, f int) error {
	recs := s.Records()
	if len(recs) != objectCount {
		return fmt.Errorf("%d DOIs registered, want %d", len(recs), objectCount)
	}
	for i, r := range recs {
		if want := fmt.Sprintf("10.5555/reef-%03d", i); r.DOI != want {
			return fmt.Errorf("record %d is %s, not %s", i, r.DOI, want)
		}
		if want := crTimestamp(in.version(i, f)); r.Timestamp != want {
			return fmt.Errorf("%s holds timestamp %d, not %d", r.DOI, r.Timestamp, want)
		}
		versions := 1
		for g := 2; g <= f; g++ {
			if in.changed[g][i] {
				versions++
			}
		}
		if r.Versions != versions {
			return fmt.Errorf("%s has %d versions, want %d", r.DOI, r.Versions, versions)
		}
	}
	return nil
}

// v1, v2 and v3 in turn on one store; then v1 again (stale or replayed,
// nothing sent); then the store lost and v3 on a new one (each DOI's
// registered timestamp read: existing, nothing uploaded).
func TestKilledCrossrefRunsApplyEachVersionOnce(t *testing.T) {
	const seed = 5
	s, err := repotest.NewCrossref(repotest.CrossrefConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	in := newObjectInputs(t, seed)
	changes, either := in.changes()
	dir := t.TempDir()
	db := filepath.Join(dir, "works.db")
	runArgs := func(endpoint, db, input string) []string {
		return []string{"run", "--protocol", "crossref", "--endpoint", endpoint + "/servlet/deposit", "--settle", "20ms",
			"--db", db, "--concurrency", "8", "--json", input}
	}
	kills := map[int][]int64{
		1: drivertest.RandomKills(seed*10+1, 3, objectCount/2),
		2: drivertest.RandomKills(seed*10+2, 2, int64(len(in.changed[2])/2)),
		3: drivertest.RandomKills(seed*10+3, 2, int64(len(in.changed[3])/2)),
	}
	addr := ""
	for f := 1; f <= 3; f++ {
		t.Run(fmt.Sprintf("v%d", f), func(t *testing.T) {
			report := drivertest.Harness{
				Handler:  s,
				Faults:   drivertest.Faults{Spec: objectFaults, Seed: int64(seed)*10 + int64(f)},
				Payloads: crPayloads(in, f),
				Command: func(c drivertest.Child) *exec.Cmd {
					cmd := exec.Command(binary, runArgs(c.Endpoint, c.Store, c.Input)...)
					cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
					return cmd
				},
				Store: db, Addr: addr, KillAt: kills[f], Runs: 12,
				Check: func([][]byte) error { return crHolds(s, in, f) },
			}.Run(t)
			require.Equal(t, len(kills[f]), report.Kills)
			addr = strings.TrimPrefix(report.Endpoint, "http://")
			st := s.Stats()
			t.Logf("v%d: %d runs, %d kills, %d faults %v; stub: %d uploads, %d registered, %d updates, %d refused as stale, %d queries",
				f, report.Runs, report.Kills, report.Stats.Faults, report.Stats.FaultsByKind, st.Uploads, st.Registered, st.Updates, st.StaleRefused, st.Queries)
		})
		if t.Failed() {
			return
		}
	}
	st := s.Stats()
	require.Equal(t, int64(objectCount), st.Registered, "one record per DOI")
	require.Equal(t, int64(changes), st.Updates, "each (work, version) change applied once")
	require.Zero(t, st.Resent, "no upload sent again under a file name already queued")
	require.NoError(t, crHolds(s, in, 3))

	m, err := drivertest.Faults{Spec: objectFaults, Seed: int64(seed)*10 + 9}.Wrap(s)
	require.NoError(t, err)
	srv := serveOn(t, addr, m)

	writeInput := func(f int) string {
		var lines []string
		for _, p := range crPayloads(in, f) {
			lines = append(lines, string(p))
		}
		return writeFile(t, dir, fmt.Sprintf("works-v%d.jsonl", f), lines...)
	}
	r := deposit(t, nil, runArgs(srv.URL, db, writeInput(1))...)
	require.Equal(t, exitDone, r.code, r.stderr)
	sum := summaryOf(t, r.stdout)
	require.Equal(t, summaryJSON{Total: objectCount, Stale: either, Replayed: objectCount - either, ElapsedMS: sum.ElapsedMS}, sum)
	require.Zero(t, m.Stats().Requests, "a v1 re-run sends nothing")
	require.Equal(t, objectsJSON{Objects: objectCount, Versions: objectCount + changes, Updates: changes, Stale: either}, objectStatus(t, db))

	lost := filepath.Join(t.TempDir(), "works.db")
	found := foundOnALostStore(t, nil, runArgs(srv.URL, lost, writeInput(3)))
	require.Equal(t, objectCount, found, "each DOI found once, holding its v3")
	after := s.Stats()
	require.Equal(t, st.Uploads, after.Uploads, "a lost store uploads nothing")
	require.Equal(t, st.Updates, after.Updates)
	require.NoError(t, crHolds(s, in, 3))
	t.Logf("%d works, %d changes (%d changed twice): %d uploads, %d updates; lost store, v3: %d found, %d requests",
		objectCount, changes, len(in.twice()), after.Uploads, after.Updates, found, m.Stats().Requests)
}
