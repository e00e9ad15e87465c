package dataverse

import (
	"bytes"
	"cmp"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/depositkit/deposit/driver"
)

// fileEntry is one file of a version's file list, or of an add's answer.
type fileEntry struct {
	Label          string `json:"label"`
	DirectoryLabel string `json:"directoryLabel"`
	DataFile       struct {
		ID               int64  `json:"id"`
		Filename         string `json:"filename"`
		OriginalFileName string `json:"originalFileName"`
		TabularData      bool   `json:"tabularData"`
		Checksum         struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"checksum"`
	} `json:"dataFile"`
}

// checksum is "TYPE:value" of the entry, as its step's identifier.
func (e fileEntry) checksum() string {
	return e.DataFile.Checksum.Type + ":" + strings.ToLower(e.DataFile.Checksum.Value)
}

// label is the entry's name.
func (e fileEntry) label() string { return cmp.Or(e.Label, e.DataFile.Filename) }

// path is the entry's dataset path, folder and name.
func (e fileEntry) path() string {
	if dir := strings.Trim(e.DirectoryLabel, "/"); dir != "" {
		return dir + "/" + e.label()
	}
	return e.label()
}

// localFile is one file of a dataset, with its checksums of the other
// types Dataverse may report (MD5 by default; SHA-1, SHA-512), computed in
// one read the first time a check needs one.
type localFile struct {
	driver.DatasetFile
	local string // path on this machine
	once  sync.Once
	sums  map[string]string
	err   error
}

// sum is the file's checksum of type typ, lower-case hex; "" when typ is
// unknown or the file cannot be read.
func (f *localFile) sum(typ string) string {
	if strings.EqualFold(typ, "SHA-256") {
		return f.SHA256
	}
	f.once.Do(func() {
		fh, err := os.Open(f.local)
		if err != nil {
			f.err = err
			return
		}
		defer fh.Close()
		hs := map[string]interface {
			io.Writer
			Sum([]byte) []byte
		}{"MD5": md5.New(), "SHA-1": sha1.New(), "SHA-512": sha512.New()}
		ws := []io.Writer{}
		for _, h := range hs {
			ws = append(ws, h)
		}
		if _, f.err = io.Copy(io.MultiWriter(ws...), fh); f.err == nil {
			f.sums = map[string]string{}
			for t, h := range hs {
				f.sums[t] = hex.EncodeToString(h.Sum(nil))
			}
		}
	})
	return f.sums[strings.ToUpper(typ)]
}

// folderAndName split the dataset path P into Dataverse's directoryLabel
// and file name.
func folderAndName(p string) (string, string) {
	dir, name := path.Split(p)
	return strings.Trim(dir, "/"), name
}

// matches reports whether e is this file: named as it is, with the same
// checksum (ingest keeps the original's).
func (f *localFile) matches(e fileEntry) bool {
	return f.named(e) && e.DataFile.Checksum.Value != "" && strings.EqualFold(f.sum(e.DataFile.Checksum.Type), e.DataFile.Checksum.Value)
}

// named reports whether e is at this file's path: the same folder, the
// same name (or, ingested, its .tab name with the original's).
func (f *localFile) named(e fileEntry) bool {
	dir, name := folderAndName(f.Path)
	if strings.Trim(e.DirectoryLabel, "/") != dir {
		return false
	}
	label := e.label()
	tab := strings.TrimSuffix(name, path.Ext(name)) + ".tab"
	return label == name || (e.DataFile.TabularData && label == tab &&
		(e.DataFile.OriginalFileName == "" || e.DataFile.OriginalFileName == name))
}

// fileList reads a version's file list.
func fileList(body []byte) ([]fileEntry, bool) {
	var list struct {
		Data []fileEntry `json:"data"`
	}
	return list.Data, json.Unmarshal(body, &list) == nil && list.Data != nil
}

// filesURL lists the latest version's files (the draft's, or the
// released version's when there is no draft).
func (d *dv) filesURL(pid string) string {
	return d.api("datasets/:persistentId/versions/:latest/files", url.Values{"persistentId": {pid}})
}

// filesStep reads the file list of a dataset the look found (a lost
// store): its identifier is the JSON list of this deposit's paths already
// there. For a dataset the look did not find it is settled at once.
func (d *dv) filesStep(key string, files []*localFile) driver.Step {
	return driver.Step{
		Label: "files", Target: d.target("files"), Key: key, Durable: true, Arbitrated: true,
		Settled: func(prior []string) (string, bool) {
			return "[]", strings.HasPrefix(prior[0], newPrefix)
		},
		Build: func(prior []string) (driver.Request, error) { return d.get(d.filesURL(prior[1])), nil },
		Judge: func(a driver.Answer) driver.Verdict {
			if a.Err != nil || a.Status != http.StatusOK {
				return judge(a, readStep)
			}
			entries, ok := fileList(a.Body)
			if !ok {
				return driver.Verdict{Class: driver.Ambiguous, Problem: "the file list cannot be read"}
			}
			there := []string{}
			for _, f := range files {
				if slices.ContainsFunc(entries, f.matches) {
					there = append(there, f.Path)
				}
			}
			id, _ := json.Marshal(there)
			return driver.Verdict{Class: driver.Created, ID: string(id)}
		},
	}
}

// localFiles are the dataset's files, under dir.
func localFiles(dir string, files []driver.DatasetFile) []*localFile {
	out := make([]*localFile, len(files))
	for i, f := range files {
		out[i] = &localFile{DatasetFile: f, local: filepath.Join(dir, filepath.FromSlash(f.Path))}
	}
	return out
}

// fileStep adds one file. It is settled by a file list that holds it; after
// an ambiguous answer the list is read before it is sent again.
func (d *dv) fileStep(key string, f *localFile) driver.Step {
	body := d.multipart(key, f, nil)
	return driver.Step{
		Label: "file " + strconv.Quote(f.Path), Target: d.target("file"), Key: key + " " + f.Path, Durable: true,
		Settled: func(prior []string) (string, bool) {
			var there []string
			_ = json.Unmarshal([]byte(prior[2]), &there)
			return "SHA-256:" + f.SHA256, slices.Contains(there, f.Path)
		},
		Build: func(prior []string) (driver.Request, error) {
			h := d.header()
			h.Set("Content-Type", "multipart/form-data; boundary="+body.boundary)
			return driver.Request{Method: http.MethodPost, Header: h, Open: body.open, Size: body.size, Full: true,
				URL: d.api("datasets/:persistentId/add", url.Values{"persistentId": {prior[1]}})}, nil
		},
		Judge: judgeAdded,
		Check: &driver.Check{
			Build: func(prior []string) (driver.Request, error) { return d.get(d.filesURL(prior[1])), nil },
			Judge: func(a driver.Answer) driver.Finding {
				if a.Err != nil || a.Status != http.StatusOK {
					return unknown(a)
				}
				entries, ok := fileList(a.Body)
				if !ok {
					return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the file list cannot be read"}
				}
				if i := slices.IndexFunc(entries, f.matches); i >= 0 {
					return driver.Finding{Kind: driver.Present, ID: entries[i].checksum()}
				}
				return driver.Finding{Kind: driver.Absent}
			},
		},
	}
}

// judgeAdded judges the answer to an add or a replace: its identifier is
// the checksum of the one file it names.
func judgeAdded(a driver.Answer) driver.Verdict {
	v := judge(a, addStep)
	if v.Class != driver.Created {
		return v
	}
	var added struct {
		Message string `json:"message"`
		Data    struct {
			Files []fileEntry `json:"files"`
		} `json:"data"`
	}
	if json.Unmarshal(a.Body, &added) != nil || len(added.Data.Files) != 1 || added.Data.Files[0].DataFile.Checksum.Value == "" {
		return driver.Verdict{Class: driver.Ambiguous, Problem: "the add answer names no file with a checksum"}
	}
	v.ID = added.Data.Files[0].checksum()
	if strings.Contains(added.Message, "same content") {
		v.Warn = "Dataverse already held a file with the same content as one added (it keeps both): " + driver.OneLine(added.Message)
	}
	return v
}

// multipartBody is an add's body: the jsonData part, then the file's
// bytes, read afresh for every attempt.
type multipartBody struct {
	boundary   string
	head, tail []byte
	local      string
	fileSize   int64
	size       int64
}

// multipart builds the add's body for f, with the jsonData options extra
// beside the add's own; its boundary is derived from the deposit and the
// path, so every attempt sends the same bytes.
func (d *dv) multipart(key string, f *localFile, extra map[string]any) *multipartBody {
	sum := sha256.Sum256([]byte(key + "\x00" + f.Path))
	boundary := "deposit-" + hex.EncodeToString(sum[:16])
	dir, name := folderAndName(f.Path)
	opts := map[string]any{"tabIngest": d.ingest}
	maps.Copy(opts, extra)
	if dir != "" {
		opts["directoryLabel"] = dir
	}
	jsonData, _ := json.Marshal(opts) // strings and a bool always marshal
	quoted := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\r", "", "\n", "").Replace(name)
	var head bytes.Buffer
	fmt.Fprintf(&head, "--%s\r\nContent-Disposition: form-data; name=\"jsonData\"\r\n\r\n%s\r\n", boundary, jsonData)
	fmt.Fprintf(&head, "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\nContent-Type: application/octet-stream\r\n\r\n", boundary, quoted)
	tail := []byte("\r\n--" + boundary + "--\r\n")
	return &multipartBody{boundary: boundary, head: head.Bytes(), tail: tail, local: f.local, fileSize: f.Size,
		size: int64(head.Len()) + f.Size + int64(len(tail))}
}

// open streams the body; the file is closed with the reader.
func (b *multipartBody) open() (io.Reader, error) {
	fh, err := os.Open(b.local)
	if err != nil {
		return nil, err
	}
	return &bodyReader{Reader: io.MultiReader(bytes.NewReader(b.head), io.LimitReader(fh, b.fileSize), bytes.NewReader(b.tail)), file: fh, size: b.size}, nil
}

// bodyReader is an add's body with its file, closed with it.
type bodyReader struct {
	io.Reader
	file *os.File
	size int64
}

func (r *bodyReader) Close() error { return r.file.Close() }
func (r *bodyReader) Len() int     { return int(r.size) }
