package repotest_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/depositkit/deposit/repotest"
)

// A test server answers a conditional PUT once with 201 and then with 412, and
// counts what happened.
func Example() {
	s, err := repotest.NewServer(repotest.Config{})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	for range 2 {
		req, _ := http.NewRequest("PUT", s.URL+"/my-key", strings.NewReader(`{"title":"Reef"}`))
		req.Header.Set("If-None-Match", "*")
		resp, err := s.Client().Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	st := s.Stats()
	fmt.Println("records:", st.Records, "replays:", st.Replays, "duplicates:", st.Duplicates)
	// Output:
	// 201 Created
	// 412 Precondition Failed
	// records: 1 replays: 1 duplicates: 0
}

// The third request for any key commits its record and then hangs up.
func ExampleParseFaults() {
	f, err := repotest.ParseFaults("503=0.1:retry-after=2, drop=0.15, nth=3:drop")
	fmt.Println(f, err)

	_, err = repotest.ParseFaults("drop=1.5")
	fmt.Println(err)
	// Output:
	// 503=0.1:retry-after=2,drop=0.15,nth=3:drop <nil>
	// repotest: bad fault spec: rule 1 "drop=1.5": want drop=P with P in (0,1]
}
