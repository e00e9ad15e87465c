package client

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// A library client with the zero Retry is as persistent as `deposit run`:
// a key whose first ten attempts are refused with 503 is still created.
// Under the library's old default of 5 attempts it ended unresolved.
func TestTheLibraryRetriesAsLongAsTheCommandLine(t *testing.T) {
	var rules []string
	for n := 1; n <= 10; n++ {
		rules = append(rules, fmt.Sprintf("nth=%d:503:retry-after=0", n))
	}
	srv, err := repotest.NewServer(repotest.Config{Faults: strings.Join(rules, ",")})
	require.NoError(t, err)
	t.Cleanup(srv.Close)

	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: openStore(t)})
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), []byte(`{"title":"Reef temperature"}`))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, 11, res.Requests, "ten refusals, then the create")
	require.EqualValues(t, 1, srv.Stats().Records)
}
