package driver

import (
	"encoding/json"
	"errors"
	"os"
)

// DatasetFile is one entry of a canonical dataset document
// ({"dataset":[{"path":P,"sha256":H,"size":N},...],"metadata":M}): P is
// relative to the dataset's folder, with / separators, and H the lowercase
// hex SHA-256 the deposit key was computed from.
type DatasetFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// DatasetFiles reads the file list of a canonical dataset document, the
// payload a driver's Steps is given with a dataset's folder; a document
// that is not one, or lists no file, is an error.
func DatasetFiles(doc []byte) ([]DatasetFile, error) {
	var d struct {
		Dataset []DatasetFile `json:"dataset"`
	}
	if err := json.Unmarshal(doc, &d); err != nil || len(d.Dataset) == 0 {
		return nil, errors.New("not a dataset document")
	}
	return d.Dataset, nil
}

// SizedFile is an open file that tells the engine's HTTP client its
// length, for a [Request.Open] that streams a dataset file: the request
// then carries a Content-Length (S3 refuses chunked uploads without
// aws-chunked encoding).
type SizedFile struct {
	*os.File
	Size int64
}

// Len is the file's length in bytes.
func (f SizedFile) Len() int { return int(f.Size) }

// JSONKind names the kind of the JSON value in canonical bytes, which
// begin with the value's first byte: "an object", "an array", "a string",
// "a number", "true", "false" or "null" ("nothing" for no bytes), for an
// error that refuses a payload a target cannot take.
func JSONKind(body []byte) string {
	if len(body) == 0 {
		return "nothing"
	}
	switch c := body[0]; {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't':
		return "true"
	case c == 'f':
		return "false"
	case c == 'n':
		return "null"
	default:
		return "a number"
	}
}
