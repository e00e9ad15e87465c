package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/client"
)

// defaultMaxLineBytes is the default --max-line-bytes: 16 MiB.
const defaultMaxLineBytes = client.DefaultMaxLineBytes

// datasetLine is the shape of a line under --datasets.
type datasetLine struct {
	Metadata json.RawMessage `json:"metadata"`
	Files    []string        `json:"files"`
}

// parseDatasetLine reads {"metadata":M,"files":[P,...]}. The line must be
// valid in form (no duplicate names, valid UTF-8, ...) and hold nothing else.
func parseDatasetLine(form canonical.Form, text []byte) (datasetLine, error) {
	var d datasetLine
	if _, err := form.Canonicalize(text); err != nil {
		return d, err
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf(`a dataset line is {"metadata":{...},"files":["path",...]}: %w`, err)
	}
	if len(d.Metadata) == 0 || bytes.Equal(d.Metadata, []byte("null")) {
		return d, errors.New(`a dataset line needs "metadata": {"metadata":{...},"files":["path",...]}`)
	}
	if len(d.Files) == 0 {
		return d, errors.New(`a dataset line needs a non-empty "files" list: {"metadata":{...},"files":["path",...]}`)
	}
	return d, nil
}

// items is the run's input: the lines' items, with the flag to raise
// named in a too-long line's error, and each line read as a dataset under
// dir when dir is set.
func items(lines iter.Seq[client.Item], form canonical.Form, dir string) iter.Seq[client.Item] {
	return func(yield func(client.Item) bool) {
		for it := range lines {
			switch {
			case it.Err != nil:
				it.Err = lineError(it.Err)
			case dir != "":
				d, err := parseDatasetLine(form, it.Payload)
				if err != nil {
					it.Err = err
				} else {
					it.Dataset = &client.Dataset{Dir: dir, Metadata: d.Metadata, Files: d.Files}
				}
				it.Payload = nil
			}
			if !yield(it) {
				return
			}
		}
	}
}

// lineError is the error of a line the reader refused, in the command
// line's terms.
func lineError(err error) error {
	if errors.Is(err, client.ErrLineTooLong) {
		return fmt.Errorf("%w; raise --max-line-bytes to accept it", err)
	}
	return err
}
