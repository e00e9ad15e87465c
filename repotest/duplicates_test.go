package repotest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// depositAll sends n payloads, retrying each until the server answers 201 or 412,
// with the key (header value under idempotency-key, URL key under put) and body
// that keyFor returns for each attempt.
func depositAll(t *testing.T, s *Server, protocol Protocol, n int, keyFor func(i, attempt int) (key, body string)) {
	t.Helper()
	for i := range n {
		done := false
		for attempt := 1; attempt <= 30 && !done; attempt++ {
			key, body := keyFor(i, attempt)
			var a answer
			var err error
			if protocol == ProtocolPut {
				a, err = send(s.Client(), "PUT", s.URL+"/"+key, body, inm, "*")
			} else {
				a, err = send(s.Client(), "POST", s.URL, body, ik, `"`+key+`"`)
			}
			done = err == nil && (a.status == http.StatusCreated || a.status == http.StatusPreconditionFailed)
		}
		require.True(t, done, "payload %d never settled", i)
	}
}

func TestDuplicatesCatchAClientThatChangesItsKeyOnRetry(t *testing.T) {
	const n = 40
	cfg := Config{Protocol: ProtocolIdempotencyKey, Faults: "drop=0.3,503=0.1", Seed: 5}
	payload := func(i int) string { return fmt.Sprintf(`{"title":"dataset %d"}`, i) }

	good := startServer(t, cfg)
	depositAll(t, good, ProtocolIdempotencyKey, n, func(i, _ int) (string, string) {
		return uuid.NewSHA1(uuid.NameSpaceURL, []byte(payload(i))).String(), payload(i)
	})
	st := good.Stats()
	require.Positive(t, st.FaultsByKind["drop"])
	require.Equal(t, int64(0), st.Duplicates)
	require.Equal(t, int64(n), st.Records)

	// A fresh key per attempt (deterministic here, random in the wild) turns every
	// dropped answer into a second record.
	bad := startServer(t, cfg)
	depositAll(t, bad, ProtocolIdempotencyKey, n, func(i, attempt int) (string, string) {
		return uuid.NewSHA1(uuid.NameSpaceURL, fmt.Appendf(nil, "%s/%d", payload(i), attempt)).String(), payload(i)
	})
	st = bad.Stats()
	require.Positive(t, st.Duplicates)
	require.Equal(t, int64(n)+st.Duplicates, st.Records)
}

func TestDuplicatesCatchAClientThatKeysOnAVolatileField(t *testing.T) {
	const n = 40
	cfg := Config{Faults: "drop=0.3,500=0.1", Seed: 9, DuplicateIgnore: []string{"sent_at"}}
	// Each attempt stamps the payload with its own time.
	body := func(i, attempt int) string {
		return fmt.Sprintf(`{"title":"dataset %d","sent_at":"2026-01-01T00:00:%02dZ"}`, i, attempt)
	}
	keyOf := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])
	}

	good := startServer(t, cfg)
	depositAll(t, good, ProtocolPut, n, func(i, attempt int) (string, string) {
		b := body(i, attempt)
		stable := b[:strings.Index(b, `,"sent_at"`)] + "}"
		return keyOf(stable), b
	})
	st := good.Stats()
	require.Positive(t, st.FaultsByKind["drop"])
	require.Equal(t, int64(0), st.Duplicates)
	require.Equal(t, int64(n), st.Records)

	bad := startServer(t, cfg)
	depositAll(t, bad, ProtocolPut, n, func(i, attempt int) (string, string) {
		b := body(i, attempt)
		return keyOf(b), b
	})
	st = bad.Stats()
	require.Positive(t, st.Duplicates)
	require.Equal(t, int64(n)+st.Duplicates, st.Records)

	// Without DuplicateIgnore the bodies differ and the server could not tell.
	cfg.DuplicateIgnore = nil
	blind := startServer(t, cfg)
	depositAll(t, blind, ProtocolPut, n, func(i, attempt int) (string, string) {
		b := body(i, attempt)
		return keyOf(b), b
	})
	require.Equal(t, int64(0), blind.Stats().Duplicates)
	require.Equal(t, bad.Stats().Records, blind.Stats().Records)
}
