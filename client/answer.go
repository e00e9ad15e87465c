package client

import (
	"bytes"
	"cmp"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/credential"
)

// maxAnswerBytes bounds how much of a response body is read when only its
// class and problem detail matter: enough for a problem detail.
const maxAnswerBytes = 64 << 10

// maxFullAnswerBytes bounds the body of an answer read for more than its
// class (driver.Request.Full): a limit no real answer reaches (a page of 100
// InvenioRDM records is well under 1 MiB, a record with 100 file entries
// about 100 KiB). A larger body is refused (errAnswerTooLarge) rather than
// read cut.
const maxFullAnswerBytes = 16 << 20

// identifierFrom applies the design's identifier rule to a create answer:
// the first pointer that names a string in a JSON body, else Location
// resolved against the request URL (without its credentials, which a bare
// Location would otherwise inherit), else the record URL.
func identifierFrom(body []byte, header http.Header, pointers []string, requestURL, recordURL string) string {
	if id, ok := driver.StringAt(body, pointers); ok {
		return id
	}
	if loc := header.Get("Location"); loc != "" {
		if base, err := url.Parse(credential.Strip(requestURL)); err == nil {
			if ref, err := url.Parse(loc); err == nil {
				return base.ResolveReference(ref).String()
			}
		}
	}
	return recordURL
}

// missedPointer is the warning for an answer whose JSON body names no string
// at user, the identifier pointer the user chose: the identifier falls back
// to Location or the record URL, most likely because the pointer is wrong.
// It is "" when the user chose no pointer (the defaults finding nothing is a
// server that mints nothing), when the body is not JSON, or when the pointer
// names a string.
func missedPointer(user string, body []byte) string {
	body = bytes.TrimSpace(body)
	if user == "" || len(body) == 0 || (body[0] != '{' && body[0] != '[') || !json.Valid(body) {
		return ""
	}
	if _, ok := driver.StringAt(body, []string{user}); ok {
		return ""
	}
	return "the identifier pointer " + strconv.Quote(user) + " names no string in the server's answer; identifiers fall back to Location or the record URL"
}

// problemDetail summarises an error body in one line: the RFC 9457 title and
// detail of a problem document, the messages of a JSON:API errors array, or
// the first line of a text body.
func problemDetail(header http.Header, body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	mt, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	if strings.HasSuffix(mt, "json") || body[0] == '{' {
		var p struct {
			Title  string `json:"title"`
			Detail string `json:"detail"`
			Errors []struct {
				Source any    `json:"source"` // a member name (DataCite) or {"pointer":...} (JSON:API)
				Title  string `json:"title"`
				Detail string `json:"detail"`
			} `json:"errors"`
		}
		if json.Unmarshal(body, &p) == nil {
			var head []string // RFC 9457: title, then detail
			for _, s := range []string{p.Title, p.Detail} {
				if s != "" {
					head = append(head, s)
				}
			}
			var parts []string // JSON:API errors, each with its source
			if len(head) > 0 {
				parts = append(parts, strings.Join(head, ": "))
			}
			for _, e := range p.Errors {
				msg := cmp.Or(e.Detail, e.Title)
				if msg == "" {
					continue
				}
				switch src := e.Source.(type) {
				case string:
					msg = src + ": " + msg
				case map[string]any:
					if ptr, ok := src["pointer"].(string); ok {
						msg = ptr + ": " + msg
					}
				}
				parts = append(parts, msg)
			}
			if len(parts) > 0 {
				return oneLine(strings.Join(parts, "; "))
			}
		}
	}
	line, _, _ := strings.Cut(string(body), "\n")
	return oneLine(line)
}

// oneLine trims s to a single printable line of at most 300 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		cut := 300
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}
