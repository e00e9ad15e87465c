package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
)

func TestDatasetLinesMustHaveMetadataAndFiles(t *testing.T) {
	tests := []struct {
		name, line, wantErr string
	}{
		{name: "metadata and files are accepted", line: `{"metadata":{"t":1},"files":["a"]}`},
		{name: "missing metadata is refused", line: `{"files":["a"]}`, wantErr: `needs "metadata"`},
		{name: "an empty file list is refused", line: `{"metadata":{},"files":[]}`, wantErr: `non-empty "files"`},
		{name: "an unknown member is refused", line: `{"metadata":{},"files":["a"],"extra":1}`, wantErr: "unknown field"},
		{name: "duplicate names are refused", line: `{"metadata":{},"metadata":{},"files":["a"]}`, wantErr: "duplicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := parseDatasetLine(canonical.FormJCS, []byte(tt.line))
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, `{"t":1}`, string(d.Metadata))
				require.Equal(t, []string{"a"}, d.Files)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}
