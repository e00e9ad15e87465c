package driver

import (
	"bytes"
	"encoding/json"
	"math/big"
	"net/http"
	"strconv"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/jsonpointer"
)

// Classify is the part of the protocol table every target shares, for a
// [Step.Judge] to start from: 200, 201 and 204 are [Created]; 401, 403,
// 404 and 501 [Stop] (credentials or endpoint are wrong); 429 and 503
// [Retry]; other 5xx, a transport error and an answer that is no
// confirmation (1xx, an unfollowed 3xx, another 2xx) [Ambiguous]; other
// 4xx [Terminal]. A driver overrides what its protocol means otherwise
// (a 409, a 412).
func Classify(a Answer) Class {
	if a.Err != nil {
		return Ambiguous
	}
	switch s := a.Status; {
	case s == http.StatusCreated || s == http.StatusOK || s == http.StatusNoContent:
		return Created
	case s == http.StatusUnauthorized || s == http.StatusForbidden || s == http.StatusNotFound ||
		s == http.StatusNotImplemented:
		return Stop
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		return Retry
	case s >= 500:
		return Ambiguous
	case s >= 400:
		return Terminal
	default:
		// Not a confirmation: ambiguous, so the attempt limit settles it.
		return Ambiguous
	}
}

// TargetName is the store target of a protocol at a normalised endpoint,
// for [Driver.Name]: the protocol, a space and the endpoint, with the value
// of each credential in its query (?access_token=...) replaced by its
// digest, so that the store never holds a token.
func TargetName(proto, endpoint string) string {
	return proto + " " + credential.Digest(endpoint)
}

// StepTarget is the store target of the rows of a deposit's step other
// than its primary one, for [Driver.StepTargets]: name, the deposit's
// target ([Driver.Name], "proto endpoint"), with "-" and step after its
// first word, the protocol: StepTarget("articles https://r.example",
// "publish") is "articles-publish https://r.example". The built-in targets
// name their steps so ("invenio-file ...", "datacite-publish ... prefix"),
// and by this rule `deposit status` (see [StepOf]) counts the rows under
// such a target as steps of the deposits under name, not as deposits of
// their own. step is one word of letters, digits and "-".
func StepTarget(name, step string) string {
	proto, rest, found := strings.Cut(name, " ")
	if !found {
		return name + "-" + step
	}
	return proto + "-" + step + " " + rest
}

// StepOf reverses [StepTarget]: when target is "proto-step rest" and
// isTarget("proto rest") (the store holds such a deposit target), it
// returns that deposit target and step; else ok is false, and target's
// rows are deposits. Of several splits (a protocol may hold "-" too) the
// one with the longest protocol is taken.
func StepOf(target string, isTarget func(string) bool) (deposit, step string, ok bool) {
	head, rest, found := strings.Cut(target, " ")
	for i := strings.LastIndexByte(head, '-'); i > 0; i = strings.LastIndexByte(head[:i], '-') {
		d := head[:i]
		if found {
			d += " " + rest
		}
		if i+1 < len(head) && isTarget(d) {
			return d, head[i+1:], true
		}
	}
	return "", "", false
}

// RecordURL is {endpoint}/{name}, the endpoint's query kept after the name.
func RecordURL(endpoint, name string) string {
	base, query, found := strings.Cut(endpoint, "?")
	if found {
		return base + "/" + name + "?" + query
	}
	return base + "/" + name
}

// StringAt returns the identifier found at the first of pointers (RFC
// 6901) that names a non-empty string or an integer in a JSON body: an
// identifier in an answer, which many APIs give as a number ({"id": 42}).
// An integer is given as its decimal text ("42"; 1e3, "1000"); a number
// with a fraction names none. The payload parser reads it, in a fifth of
// the time decoding a 3 KB record into Go values takes; a body that parser
// refuses, such as one with a member named twice, is decoded as
// encoding/json reads it.
func StringAt(body []byte, pointers []string) (string, bool) {
	body = bytes.TrimSpace(body)
	if len(pointers) == 0 || len(body) == 0 || (body[0] != '{' && body[0] != '[') {
		return "", false
	}
	if s, ok, err := canonical.IDAt(body, pointers); err == nil {
		return s, ok
	}
	return decodedStringAt(body, pointers)
}

// decodedStringAt is StringAt through encoding/json.
func decodedStringAt(body []byte, pointers []string) (string, bool) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return "", false
	}
	for _, p := range pointers {
		toks, err := jsonpointer.Parse(p)
		if err != nil {
			continue
		}
		v, _ := jsonpointer.Get(doc, toks)
		switch v := v.(type) {
		case string:
			if v != "" {
				return v, true
			}
		case json.Number:
			if s, ok := integerText(v); ok {
				return s, true
			}
		}
	}
	return "", false
}

// integerText is the decimal text of n when it is an integer (1e3 is
// "1000", 2.0 is "2"); a number with a fraction is not one, nor one whose
// exponent is beyond any identifier's length.
func integerText(n json.Number) (string, bool) {
	if i := strings.IndexAny(string(n), "eE"); i >= 0 {
		if exp, err := strconv.Atoi(string(n[i+1:])); err != nil || exp < -100 || exp > 100 {
			return "", false
		}
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() {
		return "", false
	}
	return r.Num().String(), true
}
