package driver

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/jsonpointer"
)

// Identifier applies the identifier rule to a create answer: the string
// or integer at the first of pointers (RFC 6901) that names one in a JSON
// body, as [StringAt] reads it, else
// Location resolved against the request URL (without its credentials,
// which a bare Location would otherwise inherit), else recordURL.
func Identifier(body []byte, header http.Header, pointers []string, requestURL, recordURL string) string {
	if id, ok := StringAt(body, pointers); ok {
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

// MissedPointer is the warning, for [Verdict.Warn], for an answer whose
// JSON body names no string or integer at user, the identifier pointer the user
// chose: the identifier falls back to Location or the record URL, most
// likely because the pointer is wrong. It is "" when the user chose no
// pointer (the defaults finding nothing is a server that mints nothing),
// when the body is not JSON, or when the pointer names an identifier.
func MissedPointer(user string, body []byte) string {
	body = bytes.TrimSpace(body)
	if user == "" || len(body) == 0 || (body[0] != '{' && body[0] != '[') || !json.Valid(body) {
		return ""
	}
	if _, ok := StringAt(body, []string{user}); ok {
		return ""
	}
	return "the identifier pointer " + strconv.Quote(user) + " names no string or integer in the server's answer; identifiers fall back to Location or the record URL"
}

// Problem summarises an error body in one line, for [Verdict.Problem]:
// the RFC 9457 title and detail of a problem document, the messages of a
// JSON:API errors array (each with its source), the message of a
// {"message", "code"} body many APIs answer (with its code, a string or a
// number, in brackets), or the first line of a text body; "" for an empty
// body.
func Problem(header http.Header, body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	mt, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	if strings.HasSuffix(mt, "json") || body[0] == '{' {
		var p struct {
			Title   string          `json:"title"`
			Detail  string          `json:"detail"`
			Message string          `json:"message"`
			Code    json.RawMessage `json:"code"`
			Errors  []struct {
				Source any    `json:"source"` // a member name (DataCite) or {"pointer":...} (JSON:API)
				Title  string `json:"title"`
				Detail string `json:"detail"`
			} `json:"errors"`
		}
		if json.Unmarshal(body, &p) == nil {
			var head []string // RFC 9457: title, then detail; or a message
			for _, s := range []string{p.Title, p.Detail, messageWithCode(p.Message, p.Code)} {
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
				return OneLine(strings.Join(parts, "; "))
			}
		}
	}
	line, _, _ := strings.Cut(string(body), "\n")
	return OneLine(line)
}

// messageWithCode is a body's message with its code, a string or a
// number, in brackets: "already published (E_STATE)"; "" without a
// message.
func messageWithCode(msg string, code json.RawMessage) string {
	if msg == "" {
		return ""
	}
	var c any
	if json.Unmarshal(code, &c) == nil {
		switch c := c.(type) {
		case string:
			if c != "" {
				return msg + " (" + c + ")"
			}
		case float64:
			return msg + " (" + string(bytes.TrimSpace(code)) + ")"
		}
	}
	return msg
}

// OneLine trims s to a single printable line of at most 300 bytes (its
// runs of white space made one space), for a problem an error will show.
func OneLine(s string) string {
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

// Pointers is the identifier pointers of a target: user, the pointer the
// user chose (checked as RFC 6901), else defaults.
func Pointers(user string, defaults ...string) ([]string, error) {
	if user == "" {
		return defaults, nil
	}
	if _, err := jsonpointer.Parse(user); err != nil {
		return nil, fmt.Errorf("IDPointer %q: %v", user, err)
	}
	return []string{user}, nil
}
