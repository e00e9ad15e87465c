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

// The chaos tests of issue 42 for DataCite against its stub: 300 DOIs in
// three inputs (v1; v2 with 30% changed; v3 with 30% changed again), by
// real processes SIGKILLed at writes that took effect, behind faults, each
// batch run again until it exits 0. Once with the DOIs the payloads name
// (--identity /doi), once with DOIs derived from the object key of a
// catalogue's own identifier (--identity /alternateIdentifiers/0/
// alternateIdentifier).

// dcObject is a way of naming the 300 DOIs.
type dcObject struct {
	identity string
	payload  func(i, v int) string
	// number is the object number a stub DOI's attributes name.
	number func(attrs json.RawMessage) (int, error)
}

func dcMetadata(i, v int) string {
	return fmt.Sprintf(`"titles":[{"title":"reef %d, version %d"}],"creators":[{"name":"Vega, A."}],"publisher":"Reef Institute","publicationYear":2026,"types":{"resourceTypeGeneral":"Dataset"},"url":"https://example.org/reef/%d"`, i, v, i)
}

var (
	dcNamed = dcObject{
		identity: "/doi",
		payload: func(i, v int) string {
			return fmt.Sprintf(`{"doi":"10.5072/reef-%d",%s}`, i, dcMetadata(i, v))
		},
		number: func(attrs json.RawMessage) (int, error) {
			var a struct{ DOI string }
			if err := json.Unmarshal(attrs, &a); err != nil {
				return 0, err
			}
			var i int
			_, err := fmt.Sscanf(a.DOI, "10.5072/reef-%d", &i)
			return i, err
		},
	}
	dcDerived = dcObject{
		identity: "/alternateIdentifiers/0/alternateIdentifier",
		payload: func(i, v int) string {
			return fmt.Sprintf(`{"alternateIdentifiers":[{"alternateIdentifier":"reef-%d","alternateIdentifierType":"local"}],%s}`, i, dcMetadata(i, v))
		},
		number: func(attrs json.RawMessage) (int, error) {
			var a struct {
				DOI                  string
				AlternateIdentifiers []map[string]string
			}
			if err := json.Unmarshal(attrs, &a); err != nil {
				return 0, err
			}
			if !strings.HasPrefix(a.DOI, "10.5072/dk-") || len(a.AlternateIdentifiers) == 0 {
				return 0, fmt.Errorf("DOI %s: not a derived one with a local identifier", a.DOI)
			}
			var i int
			_, err := fmt.Sscanf(a.AlternateIdentifiers[0]["alternateIdentifier"], "reef-%d", &i)
			return i, err
		},
	}
)

// dcEnv are the credentials the command requires; the stub asks for none.
var dcEnv = []string{"DATACITE_REPOSITORY_ID=DEMO.REPO", "DATACITE_PASSWORD=secret"}

func (o dcObject) payloads(in objectInputs, f int) [][]byte {
	out := make([][]byte, objectCount)
	for i := range out {
		out[i] = []byte(o.payload(i, in.version(i, f)))
	}
	return out
}

func (o dcObject) write(t *testing.T, in objectInputs, dir string, f int) string {
	t.Helper()
	var lines []string
	for _, p := range o.payloads(in, f) {
		lines = append(lines, string(p))
	}
	return writeFile(t, dir, fmt.Sprintf("dois-v%d.jsonl", f), lines...)
}

// holds checks that the stub holds one DOI per object, each with the
// title of its version in input f, its two markers, and as many metadata
// versions as the object had.
func (o dcObject) holds(s *repotest.DataCite, in objectInputs, f int) error {
	dois := s.DOIs()
	if len(dois) != objectCount {
		return fmt.Errorf("%d DOIs, want one per object (%d)", len(dois), objectCount)
	}
	seen := map[int]bool{}
	for _, d := range dois {
		i, err := o.number(d.Attributes)
		if err != nil || seen[i] {
			return fmt.Errorf("DOI %s: a second DOI of one object, or none (%v)", d.DOI, err)
		}
		seen[i] = true
		var a struct {
			Titles               []map[string]string
			AlternateIdentifiers []map[string]string
		}
		if err := json.Unmarshal(d.Attributes, &a); err != nil {
			return err
		}
		if want := fmt.Sprintf("reef %d, version %d", i, in.version(i, f)); len(a.Titles) != 1 || a.Titles[0]["title"] != want {
			return fmt.Errorf("DOI %s holds %v, not %q", d.DOI, a.Titles, want)
		}
		types := map[string]int{}
		for _, id := range a.AlternateIdentifiers {
			types[id["alternateIdentifierType"]]++
		}
		if types["deposit-sha256"] != 1 || types["deposit-version"] != 1 {
			return fmt.Errorf("DOI %s has markers %v, want one of each", d.DOI, types)
		}
		versions := 1
		for g := 2; g <= f; g++ {
			if in.changed[g][i] {
				versions++
			}
		}
		if d.Versions != versions {
			return fmt.Errorf("DOI %s has %d metadata versions, want %d", d.DOI, d.Versions, versions)
		}
	}
	return nil
}

func TestKilledDataCiteRunsUpdateEachNamedDOIOnce(t *testing.T) { dataciteChaos(t, dcNamed, 3) }

func TestKilledDataCiteRunsUpdateEachDerivedDOIOnce(t *testing.T) { dataciteChaos(t, dcDerived, 4) }

// dataciteChaos: v1, v2 and v3 of 300 DOIs in turn on one store; then v1
// again (stale or replayed, nothing sent); then the store lost and v3 on
// a new one (each DOI read back holding its v3: nothing written).
func dataciteChaos(t *testing.T, o dcObject, seed uint64) {
	s, err := repotest.NewDataCite(repotest.DataCiteConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	in := newObjectInputs(t, seed)
	changes, either := in.changes()
	dir := t.TempDir()
	db := filepath.Join(dir, "dois.db")
	runArgs := func(endpoint, db, input string) []string {
		return []string{"run", "--protocol", "datacite", "--endpoint", endpoint, "--doi-prefix", "10.5072", "--rate", "0",
			"--db", db, "--identity", o.identity, "--concurrency", "8", "--json", input}
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
				Payloads: o.payloads(in, f),
				Command: func(c drivertest.Child) *exec.Cmd {
					cmd := exec.Command(binary, runArgs(c.Endpoint, c.Store, c.Input)...)
					cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, dcEnv...)
					return cmd
				},
				Store: db, Addr: addr, KillAt: kills[f], Runs: 12,
				Check: func([][]byte) error { return o.holds(s, in, f) },
			}.Run(t)
			require.Equal(t, len(kills[f]), report.Kills)
			addr = strings.TrimPrefix(report.Endpoint, "http://")
			st := s.Stats()
			t.Logf("v%d: %d runs, %d kills, %d faults %v; stub: %d minted, %d taken, %d metadata updates, %d requests",
				f, report.Runs, report.Kills, report.Stats.Faults, report.Stats.FaultsByKind, st.Minted, st.Taken, st.MetadataUpdates, st.Requests)
		})
		if t.Failed() {
			return
		}
	}
	st := s.Stats()
	require.Equal(t, int64(objectCount), st.Minted, "one DOI per object")
	require.Equal(t, int64(changes), st.MetadataUpdates, "each (object, version) change applied once")
	require.Zero(t, st.Events)
	require.NoError(t, o.holds(s, in, 3))

	m, err := drivertest.Faults{Spec: objectFaults, Seed: int64(seed)*10 + 9}.Wrap(s)
	require.NoError(t, err)
	srv := serveOn(t, addr, m)

	env := map[string]string{}
	for _, kv := range dcEnv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	r := deposit(t, env, runArgs(srv.URL, db, o.write(t, in, dir, 1))...)
	require.Equal(t, exitDone, r.code, r.stderr)
	sum := summaryOf(t, r.stdout)
	require.Equal(t, summaryJSON{Total: objectCount, Stale: either, Replayed: objectCount - either, ElapsedMS: sum.ElapsedMS}, sum)
	require.Zero(t, m.Stats().Requests, "a v1 re-run sends nothing")
	require.Equal(t, objectsJSON{Objects: objectCount, Versions: objectCount + changes, Updates: changes, Stale: either}, objectStatus(t, db))

	lost := filepath.Join(t.TempDir(), "dois.db")
	args := runArgs(srv.URL, lost, o.write(t, in, dir, 3))
	found := foundOnALostStore(t, env, args)
	require.Equal(t, objectCount, found, "each DOI found once, holding its v3")
	after := s.Stats()
	require.Equal(t, st.Minted, after.Minted, "a lost store mints nothing")
	require.Equal(t, st.MetadataUpdates, after.MetadataUpdates, "a lost store updates nothing")
	require.Equal(t, st.Updates, after.Updates, "nor sends any PUT")
	require.NoError(t, o.holds(s, in, 3))
	t.Logf("%d DOIs, %d changes (%d objects changed twice): %d minted, %d metadata updates; lost store, v3: %d found, %d requests, %d taken answers",
		objectCount, changes, len(in.twice()), after.Minted, after.MetadataUpdates, found, m.Stats().Requests, after.Taken-st.Taken)
}
