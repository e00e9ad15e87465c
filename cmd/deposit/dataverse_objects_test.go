package main

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/repotest"
)

// The chaos test of issue 43 for Dataverse against its stub: 100 datasets
// named by the lab's own otherId (--identity), each with files, then 30%
// of them changed (half the metadata only, half the files: one replaced,
// and for every other one a file deleted and one added), by real
// processes SIGKILLed at writes that took effect, behind faults, index lag
// and publication lag, each batch run again until it exits 0.

// dvObjects is how many datasets the chaos test deposits.
const dvObjects = 100

// dvObjectIdentity is the lab's otherId in dvObjectMetadata, in the
// dataset's metadata.
const dvObjectIdentity = "/datasetVersion/metadataBlocks/citation/fields/5/value/0/otherIdValue/value"

// dvChange is what input 2 changes of an object.
type dvChange int

const (
	dvSame dvChange = iota
	dvChangeMetadata
	dvChangeFiles
)

// dvObjectInputs are the two inputs' changes, by object.
type dvObjectInputs map[int]dvChange

func newDVObjectInputs(seed uint64) dvObjectInputs {
	rnd := rand.New(rand.NewPCG(seed, 43))
	in := dvObjectInputs{}
	for n, i := range rnd.Perm(dvObjects)[:dvObjects*3/10] {
		in[i] = dvChangeMetadata
		if n%2 == 1 {
			in[i] = dvChangeFiles
		}
	}
	return in
}

func (in dvObjectInputs) count(c dvChange) int {
	n := 0
	for _, v := range in {
		if v == c {
			n++
		}
	}
	return n
}

// title is object i's title in input f.
func (in dvObjectInputs) title(i, f int) string {
	if f == 2 && in[i] == dvChangeMetadata {
		return fmt.Sprintf("Survey %03d, corrected", i)
	}
	return fmt.Sprintf("Survey %03d", i)
}

// files are object i's files in input f, path to content.
func (in dvObjectInputs) files(i, f int) map[string]string {
	out := map[string]string{
		fmt.Sprintf("%d/a.txt", i):     fmt.Sprintf("a of %d\n", i),
		fmt.Sprintf("%d/sub/b.txt", i): fmt.Sprintf("b of %d\n", i),
	}
	if f == 2 && in[i] == dvChangeFiles {
		out[fmt.Sprintf("%d/a.txt", i)] = fmt.Sprintf("a of %d, measured again\n", i)
		if i%2 == 0 {
			delete(out, fmt.Sprintf("%d/sub/b.txt", i))
			out[fmt.Sprintf("%d/c.txt", i)] = fmt.Sprintf("c of %d\n", i)
		}
	}
	return out
}

// dvObjectLine is object i's line titled title with files: the lab's
// otherId (the identity) stays, whatever the title.
func dvObjectLine(i int, title string, files ...string) string {
	return strings.Replace(dvMetadata(title, files...), `"LAB-`+title+`"`, fmt.Sprintf(`"LAB-%03d"`, i), 1)
}

// write writes input f's files under dir/data-vF and its lines; it
// returns the input and the data folder.
func (in dvObjectInputs) write(t *testing.T, dir string, f int) (string, string) {
	t.Helper()
	data := filepath.Join(dir, fmt.Sprintf("data-v%d", f))
	var lines []string
	for i := range dvObjects {
		files := in.files(i, f)
		paths := slices.Sorted(func(yield func(string) bool) {
			for p := range files {
				if !yield(p) {
					return
				}
			}
		})
		for _, p := range paths {
			full := filepath.Join(data, filepath.FromSlash(p))
			require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
			require.NoError(t, os.WriteFile(full, []byte(files[p]), 0o600))
		}
		lines = append(lines, dvObjectLine(i, in.title(i, f), paths...))
	}
	return writeFile(t, dir, fmt.Sprintf("datasets-v%d.jsonl", f), lines...), data
}

// holds checks that the stub holds one released dataset per object, with
// input f's title and files (each once, by checksum), its two markers,
// and the versions its changes made: 1.0, then 1.1 for a metadata change
// or 2.0 for a change of files.
func (in dvObjectInputs) holds(dv *repotest.Dataverse, f int) error {
	all := dv.Datasets()
	if len(all) != dvObjects {
		return fmt.Errorf("%d datasets, want one per object (%d)", len(all), dvObjects)
	}
	seen := map[int]bool{}
	for _, ds := range all {
		var i int
		if len(ds.OtherIDs) != 3 {
			return fmt.Errorf("dataset %s has otherIds %v, want the lab's and two markers", ds.PersistentID, ds.OtherIDs)
		}
		if _, err := fmt.Sscanf(ds.OtherIDs[0], "LAB-%d", &i); err != nil || seen[i] {
			return fmt.Errorf("dataset %s: a second dataset of one object, or none (%v)", ds.PersistentID, err)
		}
		seen[i] = true
		if !strings.HasPrefix(ds.OtherIDs[1], "deposit:sha256:") || !strings.HasPrefix(ds.OtherIDs[2], "deposit-version:sha256:") {
			return fmt.Errorf("dataset %s has markers %v", ds.PersistentID, ds.OtherIDs[1:])
		}
		if ds.VersionState != "RELEASED" || ds.Title != in.title(i, f) {
			return fmt.Errorf("dataset %s is %s titled %q, want released, %q", ds.PersistentID, ds.VersionState, ds.Title, in.title(i, f))
		}
		want := []string{"1.0"}
		switch {
		case f == 2 && in[i] == dvChangeMetadata:
			want = append(want, "1.1")
		case f == 2 && in[i] == dvChangeFiles:
			want = append(want, "2.0")
		}
		if !slices.Equal(ds.Versions, want) {
			return fmt.Errorf("dataset %s has versions %v, want %v", ds.PersistentID, ds.Versions, want)
		}
		files := in.files(i, f)
		if len(ds.Files) != len(files) {
			return fmt.Errorf("dataset %s has %d files, want %d: %+v", ds.PersistentID, len(ds.Files), len(files), ds.Files)
		}
		for _, df := range ds.Files {
			p := df.DirectoryLabel + "/" + df.Label
			sum := md5.Sum([]byte(files[p]))
			if content, ok := files[p]; !ok || df.MD5 != hex.EncodeToString(sum[:]) {
				return fmt.Errorf("dataset %s: file %s is not input %d's (%q)", ds.PersistentID, p, f, content)
			}
		}
	}
	return nil
}

// dvObjectCommand is the deposit run of input with --identity.
func dvObjectCommand(endpoint, db, input, data string) *exec.Cmd {
	cmd := dvCommand(endpoint, db, input, data)
	cmd.Args = append(cmd.Args[:len(cmd.Args)-1], "--identity", dvObjectIdentity, input)
	return cmd
}

// Chaos, Dataverse objects (issue 43): v1 then v2 of 100 datasets on one
// store, behind the stub's faults (drops after the write, 5xx, 429, a 504
// after a publish was accepted, on reads too), index and publication lag,
// runs SIGKILLed at writes that took effect: one dataset per object, each
// holding its last title and files, one minor (metadata only) or major
// (files) version per change, equal files never sent again, no draft left.
// Then v1 again: the changed objects stale, the others replayed, nothing
// sent. Then the store lost and v2 on a new one: nothing written.
func TestKilledDataverseRunsUpdateEachDatasetOnce(t *testing.T) {
	dv, err := repotest.NewDataverse(repotest.DataverseConfig{
		Token: dvToken, Seed: 43, IndexLag: 20 * time.Millisecond, PublishLag: 20 * time.Millisecond,
		Faults: "drop=0.06,503=0.04,500=0.04,429=0.04,504=0.04,reads",
	})
	require.NoError(t, err)
	t.Cleanup(func() { dv.Close() })
	in := newDVObjectInputs(7)
	dir := t.TempDir()
	db := filepath.Join(dir, "datasets.db")
	inputs := map[int][2]string{}
	for f := 1; f <= 2; f++ {
		input, data := in.write(t, dir, f)
		inputs[f] = [2]string{input, data}
	}
	kills := map[int][]int64{1: drivertest.RandomKills(431, 2, 4*dvObjects), 2: drivertest.RandomKills(432, 2, 4*int64(len(in)))}
	addr := ""
	for f := 1; f <= 2; f++ {
		t.Run(fmt.Sprintf("v%d", f), func(t *testing.T) {
			report := drivertest.Harness{
				Handler: dv,
				Command: func(c drivertest.Child) *exec.Cmd {
					return dvObjectCommand(c.Endpoint, c.Store, inputs[f][0], inputs[f][1])
				},
				Store: db, Addr: addr, KillAt: kills[f], Runs: 12,
				Check: func([][]byte) error { return in.holds(dv, f) },
			}.Run(t)
			require.Equal(t, len(kills[f]), report.Kills)
			addr = strings.TrimPrefix(report.Endpoint, "http://")
			s := dv.Stats()
			t.Logf("v%d: %d runs, %d kills; stub: %d datasets, %d files, %d draft writes, %d replaced, %d deleted, %d publishes (%d minor, %d major), %d faults %v, %d requests",
				f, report.Runs, report.Kills, s.Datasets, s.Files, s.DraftWrites, s.Replaced, s.Deleted, s.Publishes, s.Minor, s.Major, s.Faults, s.FaultsByKind, s.Requests)
		})
		if t.Failed() {
			return
		}
	}
	s := dv.Stats()
	require.Equal(t, int64(dvObjects), s.Datasets, "one dataset per object")
	require.Zero(t, s.DuplicateMarkers)
	require.Zero(t, s.DuplicateFiles, "no file added twice")
	require.Zero(t, s.RenamedFiles)
	require.Zero(t, s.Drafts, "no draft left")
	require.Zero(t, s.Discarded)
	require.Equal(t, int64(in.count(dvChangeMetadata)), s.Minor, "one minor version per metadata change")
	require.Equal(t, int64(in.count(dvChangeFiles)), s.Major, "one major version per change of files")
	require.Equal(t, int64(in.count(dvChangeFiles)), s.Replaced, "each changed file replaced once")
	moved := 0 // objects whose change deletes b.txt and adds c.txt
	for i, c := range in {
		if c == dvChangeFiles && i%2 == 0 {
			moved++
		}
	}
	require.Equal(t, int64(2*dvObjects+moved), s.Files, "each new file added once, no equal one sent again")
	require.Equal(t, int64(moved), s.Deleted, "each file gone deleted once")
	require.NotZero(t, s.Faults)

	srv := serveOn(t, addr, dv)
	before := dv.Stats()
	r := deposit(t, map[string]string{"DEPOSIT_AUTHORIZATION": dvToken}, dvObjectCommand(srv.URL, db, inputs[1][0], inputs[1][1]).Args[1:]...)
	require.Equal(t, exitDone, r.code, r.stderr)
	sum := summaryOf(t, r.stdout)
	require.Equal(t, summaryJSON{Total: dvObjects, Stale: len(in), Replayed: dvObjects - len(in), ElapsedMS: sum.ElapsedMS}, sum)
	require.Equal(t, before.Requests, dv.Stats().Requests, "a v1 re-run sends nothing")

	lost := filepath.Join(t.TempDir(), "datasets.db")
	found := foundOnALostStore(t, map[string]string{"DEPOSIT_AUTHORIZATION": dvToken}, dvObjectCommand(srv.URL, lost, inputs[2][0], inputs[2][1]).Args[1:])
	require.Equal(t, dvObjects, found, "each dataset found once, holding its v2")
	after := dv.Stats()
	require.Equal(t, s.Datasets, after.Datasets, "a lost store creates nothing")
	require.Equal(t, s.Files+s.Replaced+s.Deleted+s.DraftWrites+s.Discarded, after.Files+after.Replaced+after.Deleted+after.DraftWrites+after.Discarded, "nor changes a file or a draft")
	require.Equal(t, s.Publishes, after.Publishes, "nor publishes")
	require.NoError(t, in.holds(dv, 2))
	t.Logf("%d datasets, %d changed (%d metadata, %d files): %d minor, %d major; lost store, v2: %d found, %.1f requests per dataset",
		dvObjects, len(in), in.count(dvChangeMetadata), in.count(dvChangeFiles), after.Minor, after.Major, found, float64(after.Requests-before.Requests)/dvObjects)
}
