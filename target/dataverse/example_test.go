package dataverse_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/dataverse"
)

// Deposit a dataset with one file to a Dataverse collection (here the
// test stub, which loses the answer to the create after it took effect):
// the create is found by its marker, not sent again, and a replay is
// answered from the store.
func Example() {
	srv, err := repotest.NewDataverseServer(repotest.DataverseConfig{Token: "my-api-token", Faults: "nth=1:drop"})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	dir, err := os.MkdirTemp("", "dataverse-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "rain.csv"), []byte("day,mm\n1,4.2\n"), 0o600); err != nil {
		panic(err)
	}
	store, err := dedup.Open(filepath.Join(dir, "deposit.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	c, err := client.New(client.Config{
		Target: dataverse.Target{Endpoint: srv.URL, Collection: "root", Token: "my-api-token"},
		Store:  store,
	})
	if err != nil {
		panic(err)
	}
	// Dataverse's native JSON, with the five citation fields it requires.
	native := []byte(`{"datasetVersion":{"license":{"name":"CC0 1.0"},"metadataBlocks":{"citation":{"fields":[
{"typeName":"title","multiple":false,"typeClass":"primitive","value":"Rainfall in Utrecht"},
{"typeName":"author","multiple":true,"typeClass":"compound","value":[{"authorName":{"typeName":"authorName","multiple":false,"typeClass":"primitive","value":"Vega, Ana"}}]},
{"typeName":"datasetContact","multiple":true,"typeClass":"compound","value":[{"datasetContactEmail":{"typeName":"datasetContactEmail","multiple":false,"typeClass":"primitive","value":"vega@example.edu"}}]},
{"typeName":"dsDescription","multiple":true,"typeClass":"compound","value":[{"dsDescriptionValue":{"typeName":"dsDescriptionValue","multiple":false,"typeClass":"primitive","value":"Daily rainfall."}}]},
{"typeName":"subject","multiple":true,"typeClass":"controlledVocabulary","value":["Earth and Environmental Sciences"]}]}}}}`)
	for range 2 {
		res, err := c.DepositDataset(context.Background(), dir, native, []string{"rain.csv"})
		fmt.Println(res.Outcome, res.Identifier, err)
	}
	s := srv.Stats()
	fmt.Println("datasets:", s.Datasets, "files:", s.Files, "released:", s.Released)
	// Output:
	// created doi:10.5072/FK2/QYZQHS <nil>
	// replayed doi:10.5072/FK2/QYZQHS <nil>
	// datasets: 1 files: 1 released: 1
}
