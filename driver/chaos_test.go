package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/drivertest"
)

const (
	shelfLag    = 100 * time.Millisecond // how far the search lags writes
	shelfSettle = 2 * shelfLag
)

// Two processes deposit one batch to a Shelf on one SQLite store at once,
// through refusals (500, 503) and lost answers (dropped connections) at
// both steps and a search that lags writes; two runs are SIGKILLed, each
// at a write of its own that took effect, and run again until they end
// with nothing unresolved. The server ends with one record per distinct
// payload, each published by one request, and no publish sent to a record
// already published; every store row is done with the server's
// identifier, and a replay sends nothing (drivertest checks both).
func TestShelfDepositsEachPayloadOnceThroughKillsAndFaults(t *testing.T) {
	payloads, titles := shelfPayloads(t, 300, 30)
	srv := &chaosShelf{}
	report := drivertest.Harness{
		Handler: srv.Handler(),
		Faults: drivertest.Faults{Spec: "500=0.05,503=0.05:retry-after=1,drop=0.07", Seed: 7, Lag: shelfLag,
			Read: func(r *http.Request) bool { return r.Method == http.MethodGet }},
		Payloads: payloads,
		Workers:  2,
		Client: func(c drivertest.Child) (client.Config, error) {
			return client.Config{
				Target: Shelf{Endpoint: c.Endpoint, Settle: shelfSettle},
				// A dead worker's keys are taken over at once (dedup.OwnerGone); the
				// lease only bounds a live one that stalls, which -race on a busy
				// machine can make long.
				Lease: 10 * time.Second,
				Retry: backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 6},
			}, nil
		},
		KillAt: []int64{int64(len(titles) / 4), int64(len(titles) * 3 / 2)},
		Check: func([][]byte) error {
			records, _ := srv.snapshot()
			return checkShelfRecords(records, titles)
		},
	}.Run(t)
	records, counts := srv.snapshot()
	t.Logf("%d lines, %d distinct; server: %d records, %d requests (%d creates, %d publishes, %d searches); "+
		"middleware: %+v; %d runs, %d processes killed",
		len(titles), distinctCount(titles), len(records), counts.Requests, counts.Creates, counts.Publishes, counts.Searches,
		report.Stats, report.Runs, report.Kills)
	require.Equal(t, 2, report.Kills, "both kills struck a running worker")
	checkShelfStore(t, report.Store, records)
}

// shelfPayloads returns distinct payloads and more that repeat some of
// them, shuffled, and each one's title.
func shelfPayloads(t *testing.T, distinct, repeats int) ([][]byte, []string) {
	rnd := rand.New(rand.NewPCG(3, 5))
	titles := make([]string, 0, distinct+repeats)
	for i := range distinct {
		titles = append(titles, fmt.Sprintf("Shelf item %d", i))
	}
	for range repeats {
		titles = append(titles, titles[rnd.IntN(distinct)])
	}
	rnd.Shuffle(len(titles), func(i, j int) { titles[i], titles[j] = titles[j], titles[i] })
	payloads := make([][]byte, len(titles))
	for i, title := range titles {
		line, err := json.Marshal(map[string]string{"title": title})
		require.NoError(t, err)
		payloads[i] = line
	}
	return payloads, titles
}

// checkShelfRecords checks the server: one record per distinct title,
// published by exactly one request, and no publish sent to a record
// already published.
func checkShelfRecords(records []shelfRecord, titles []string) error {
	byTitle := map[string]int{}
	for _, rec := range records {
		byTitle[rec.title]++
	}
	for _, title := range titles {
		if byTitle[title] != 1 {
			return fmt.Errorf("%d records of %q", byTitle[title], title)
		}
	}
	if len(records) != distinctCount(titles) {
		return fmt.Errorf("%d records, want %d", len(records), distinctCount(titles))
	}
	markers := map[string]bool{}
	again := 0
	for i, rec := range records {
		if markers[rec.marker] {
			return fmt.Errorf("marker %s is on two records", rec.marker)
		}
		markers[rec.marker] = true
		if rec.published.IsZero() || rec.publishes != 1 {
			return fmt.Errorf("record %d (%s) was published by %d requests", i+1, rec.title, rec.publishes)
		}
		again += rec.again
	}
	if again > 0 {
		return fmt.Errorf("%d publish requests sent to a record already published", again)
	}
	return nil
}

// checkShelfStore checks that the store has one row per record and step,
// the deposit's naming the server's record for its marker.
func checkShelfStore(t *testing.T, db string, records []shelfRecord) {
	t.Helper()
	store, err := dedup.OpenReadOnly(db)
	require.NoError(t, err)
	defer store.Close()
	idOf := map[string]string{}
	for i, rec := range records {
		idOf[rec.marker] = strconv.Itoa(i + 1)
	}
	rows := map[string]int{}
	for row, err := range store.List(context.Background(), "", "") {
		require.NoError(t, err)
		require.Equal(t, dedup.StateDone, row.State, "%s %s", row.Target, row.Key)
		require.Equal(t, idOf[row.Key], row.Identifier, "%s %s", row.Target, row.Key)
		rows[row.Target]++
	}
	require.Len(t, rows, 2, "the deposits' and the publishes' rows: %v", rows)
	for target, n := range rows {
		require.Equal(t, len(records), n, target)
	}
}

func distinctCount(titles []string) int {
	seen := map[string]bool{}
	for _, title := range titles {
		seen[title] = true
	}
	return len(seen)
}
