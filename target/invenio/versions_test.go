package invenio

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// The reserved member "deposit" picks the steps, is never sent, and is
// part of the key; a member it does not know, or both choices, make the
// line invalid before any request.
func TestLineOptionsPickTheStepsAndAreNeverSent(t *testing.T) {
	d, err := Target{Endpoint: "https://zenodo.org/api"}.Driver()
	require.NoError(t, err)
	keyer, err := canonical.NewKeyer(canonical.FormJCS, nil)
	require.NoError(t, err)
	labels := func(steps []driver.Step) []string {
		var out []string
		for _, s := range steps {
			out = append(out, s.Label)
		}
		return out
	}
	steps := func(payload string) ([]driver.Step, canonical.Keyed, error) {
		k, err := keyer.Key([]byte(payload))
		require.NoError(t, err)
		s, err := d.Steps(k, "")
		return s, k, err
	}

	plain, kPlain, err := steps(`{"title":"t"}`)
	require.NoError(t, err)
	require.Equal(t, []string{"draft", "publish"}, labels(plain))

	version, kVersion, err := steps(`{"title":"t","deposit":{"new_version_of":"abcde-12345"}}`)
	require.NoError(t, err)
	require.NotEqual(t, kPlain.Key, kVersion.Key, "the choice is part of the key")
	require.Equal(t, []string{"latest version", "new version", "new version marker", "files import", "publish"}, labels(version))
	req, err := version[0].Build(make([]string, len(version)))
	require.NoError(t, err)
	require.Equal(t, "https://zenodo.org/api/records/abcde-12345/versions/latest", req.URL)
	mark, err := version[2].Build([]string{"abcde-12345 files " + Marker("0", nil), "fghjk-67890 " + Marker("0", nil), "", "", ""})
	require.NoError(t, err)
	require.NotContains(t, string(mark.Body), `"deposit"`)
	require.Contains(t, string(mark.Body), Marker(kVersion.Key, nil))
	require.NotContains(t, string(mark.Body), Marker("0", nil), "the inherited marker is replaced")
	require.Equal(t, "new-version abcde-12345", d.(driver.Serializer).Serial(kVersion))
	require.Empty(t, d.(driver.Serializer).Serial(kPlain))

	submission, _, err := steps(`{"title":"t","deposit":{"community":"c-1"}}`)
	require.NoError(t, err)
	require.Equal(t, []string{"draft", "review", "submit review"}, labels(submission))
	draft, err := submission[0].Build(nil)
	require.NoError(t, err)
	require.NotContains(t, string(draft.Body), `"deposit"`)

	for _, bad := range []string{
		`{"title":"t","deposit":{"new_version_of":"a","community":"c"}}`,
		`{"title":"t","deposit":{"version_of":"a"}}`,
		`{"title":"t","deposit":{}}`,
		`{"title":"t","deposit":"a"}`,
	} {
		_, _, err := steps(bad)
		require.Error(t, err, bad)
	}
	drafts, err := Target{Endpoint: "https://zenodo.org/api", NoPublish: true}.Driver()
	require.NoError(t, err)
	k, err := keyer.Key([]byte(`{"title":"t","deposit":{"community":"c-1"}}`))
	require.NoError(t, err)
	_, err = drafts.Steps(k, "")
	require.ErrorContains(t, err, "community")
}
