package osf

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/drivertest"
)

func TestStepsFollowTheRules(t *testing.T) {
	for _, tg := range []Target{{}, {Public: true}, {DOI: true, Parent: "abc12"}} {
		d, err := tg.Driver()
		require.NoError(t, err)
		require.NoError(t, drivertest.CheckDriver(d, []byte(`{"title":"Reef"}`)))
	}
}

// fileStepOf is the file step of a dataset of one file, a.txt.
func fileStepOf(t *testing.T) (driver.Step, string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o600))
	const sum = "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7"
	d, err := Target{}.Driver()
	require.NoError(t, err)
	steps, err := d.Steps(canonical.Keyed{Key: "k", Body: []byte(`{"dataset":[{"path":"x/a.txt","sha256":"` + sum + `","size":2}],"metadata":{"title":"T"}}`)}, dir)
	require.NoError(t, err)
	require.Equal(t, `file "a.txt"`, steps[1].Label)
	return steps[1], sum
}

// A 409 is this file when the file holding the name has its SHA-256, a
// failure when another does, and looked into when it names none.
func TestUploadConflictIsJudgedByHash(t *testing.T) {
	s, sum := fileStepOf(t)
	conflict := func(body string) driver.Verdict {
		return s.Judge(driver.Answer{Status: http.StatusConflict, Body: []byte(body)})
	}
	v := conflict(`{"message":"Cannot complete action: file or folder \"a.txt\" already exists in this location","data":{"attributes":{"kind":"file","name":"a.txt","path":"/f1","extra":{"hashes":{"sha256":"` + sum + `"}}}}}`)
	require.Equal(t, driver.Exists, v.Class)
	require.Equal(t, "/f1", v.ID)
	v = conflict(`{"message":"...","data":{"attributes":{"kind":"file","name":"a.txt","path":"/f2","extra":{"hashes":{"sha256":"00"}}}}}`)
	require.Equal(t, driver.Terminal, v.Class)
	require.Contains(t, v.Problem, "another file")
	require.Equal(t, driver.Conflict, conflict(`{"code":409,"message":"conflict"}`).Class)
}

func TestSecondDOIIsExisting(t *testing.T) {
	d, err := Target{DOI: true}.Driver()
	require.NoError(t, err)
	steps, err := d.Steps(canonical.Keyed{Key: "k", Body: []byte(`{"title":"T"}`)}, "")
	require.NoError(t, err)
	doi := steps[len(steps)-2]
	require.Equal(t, "doi", doi.Label)
	v := doi.Judge(driver.Answer{Status: http.StatusBadRequest, Body: []byte(`{"errors":[{"detail":"A DOI already exists for this resource."}]}`)})
	require.Equal(t, driver.Exists, v.Class)
	v = doi.Judge(driver.Answer{Status: http.StatusBadRequest, Body: []byte(`{"errors":[{"detail":"You can only mint a DOI, not a different type of identifier."}]}`)})
	require.Equal(t, driver.Terminal, v.Class)
}

func TestMarkerOfAnotherDepositIsRefused(t *testing.T) {
	d, err := Target{}.Driver()
	require.NoError(t, err)
	_, err = d.Steps(canonical.Keyed{Key: "k", Body: []byte(`{"title":"T","tags":["deposit:sha256:other"]}`)}, "")
	require.ErrorContains(t, err, "deposit marker")
}
