package invenio

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The store targets are spelled out: a store written by an earlier version
// holds its rows under these names, and a run must find them there.
func TestStoreTargetNamesArePinned(t *testing.T) {
	d, err := Target{Endpoint: "HTTPS://Zenodo.org/api/"}.Driver()
	require.NoError(t, err)
	require.Equal(t, "invenio https://zenodo.org/api", d.Name())
	require.Equal(t, []string{"invenio-file https://zenodo.org/api", "invenio-recheck https://zenodo.org/api",
		"invenio-mark https://zenodo.org/api",
		"invenio-review https://zenodo.org/api", "invenio-edit https://zenodo.org/api", "invenio-update https://zenodo.org/api",
		"invenio-draft https://zenodo.org/api"}, d.StepTargets())
	require.Equal(t, "invenio-scan https://zenodo.org/api", d.(interface{ ScanTarget() string }).ScanTarget())
	d, err = Target{Endpoint: "https://zenodo.org/api", NoPublish: true}.Driver()
	require.NoError(t, err)
	require.Equal(t, "invenio-draft https://zenodo.org/api", d.Name(), "drafts a later run publishes are found done")
	require.Equal(t, []string{"invenio-file https://zenodo.org/api", "invenio-recheck https://zenodo.org/api",
		"invenio-mark https://zenodo.org/api",
		"invenio-review https://zenodo.org/api", "invenio-edit https://zenodo.org/api", "invenio-update https://zenodo.org/api"}, d.StepTargets())
}
