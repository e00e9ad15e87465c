package driver

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkIdentifierFromAnswer reads the identifier out of a create
// answer, as every deposit does: through the payload parser (what the
// client does) and by decoding into Go values (what it did), for a small
// answer like repotest's and a 3 KB record like InvenioRDM's.
func BenchmarkIdentifierFromAnswer(b *testing.B) {
	small := []byte(`{"identifier":"10.5072/repotest.8f3a9c1d","key":"8f3a9c1d2e4b5a6f7081928374655647382910abcdef0123456789abcdef0123"}`)
	var creators []string
	for i := range 20 {
		creators = append(creators, fmt.Sprintf(`{"person_or_org":{"type":"personal","name":"Author %d, A.","given_name":"A.","family_name":"Author %d"},"affiliations":[{"name":"Institute %d"}]}`, i, i, i))
	}
	record := []byte(`{"id":"a1b2c-3d4e5","created":"2026-12-01T10:00:00+00:00","pids":{"doi":{"identifier":"10.5072/zenodo.1234","provider":"datacite"}},` +
		`"metadata":{"title":"A record","resource_type":{"id":"dataset"},"publication_date":"2026-12-01","creators":[` + strings.Join(creators, ",") + `]},` +
		`"links":{"self":"https://repo.example/api/records/a1b2c-3d4e5","files":"https://repo.example/api/records/a1b2c-3d4e5/files"}}`)
	for _, c := range []struct {
		name     string
		body     []byte
		pointers []string
		want     string
	}{
		{"small", small, []string{"/identifier"}, "10.5072/repotest.8f3a9c1d"},
		{"record", record, []string{"/pids/doi/identifier", "/id"}, "10.5072/zenodo.1234"},
	} {
		for _, read := range []struct {
			name string
			f    func([]byte, []string) (string, bool)
		}{{"parser", StringAt}, {"decoded", decodedStringAt}} {
			b.Run(c.name+"/"+read.name, func(b *testing.B) {
				b.SetBytes(int64(len(c.body)))
				for b.Loop() {
					if got, ok := read.f(c.body, c.pointers); !ok || got != c.want {
						b.Fatalf("got %q, %v", got, ok)
					}
				}
			})
		}
	}
}

// An answer the payload parser refuses is still read as encoding/json reads
// it: a member named twice gives its last value.
func TestAnAnswerThePayloadParserRefusesIsStillRead(t *testing.T) {
	for body, want := range map[string]string{
		`{"identifier":"first","identifier":"last"}`: "last",
		`{"identifier":"big","n":1e400}`:             "big",
		`{"identifier":"ok"}`:                        "ok",
	} {
		got, ok := StringAt([]byte(body), []string{"/identifier"})
		require.True(t, ok, body)
		require.Equal(t, want, got, body)
	}
}
