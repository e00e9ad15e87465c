package crossref

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// ErrInvalidWork is wrapped by the error of a line that is not one work.
var ErrInvalidWork = errors.New("crossref: invalid work")

// line is an input line: one work's DOI and its deposit XML, inline (XML)
// or in a file (XMLFile) relative to the target's Dir.
type line struct {
	DOI     string `json:"doi"`
	XML     string `json:"xml,omitempty"`
	XMLFile string `json:"xml_file,omitempty"`
	// The members the body a line becomes adds (payload): a body kept by
	// an intent is read as a line again, to key the version it holds.
	Upload    string `json:"upload,omitempty"`
	Object    string `json:"object,omitempty"`
	Timestamp string `json:"timestamp,omitempty"`
}

// work is a line whose XML was read and checked: exactly one doi_data,
// whose doi is the line's, and a head with its own doi_batch_id and
// timestamp.
type work struct {
	DOI       string
	XML       string
	BatchID   string
	Timestamp uint64
}

// parseLine reads a line's JSON strictly: an unknown member is refused, so
// that the key of a line is what the page on the key rule says.
func parseLine(text []byte) (line, error) {
	var l line
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return l, fmt.Errorf(`%w: a line is {"doi":"10.x/y","xml":"<doi_batch ...>"} or {"doi":...,"xml_file":"path"}: %w`, ErrInvalidWork, err)
	}
	l.DOI = strings.TrimSpace(l.DOI)
	switch {
	case l.DOI == "":
		return l, fmt.Errorf(`%w: the line has no "doi"`, ErrInvalidWork)
	case (l.XML == "") == (l.XMLFile == ""):
		return l, fmt.Errorf(`%w: give the deposit XML as "xml" or as "xml_file", one of the two`, ErrInvalidWork)
	}
	return l, nil
}

// readXML returns the line's XML: inline, or read from its file in dir
// ("" is the working directory), a path that may not lead out of dir.
func readXML(l line, dir string) (string, error) {
	if l.XML != "" {
		return l.XML, nil
	}
	if dir == "" {
		dir = "."
	}
	f, err := os.OpenInRoot(dir, l.XMLFile)
	if err != nil {
		return "", fmt.Errorf("%w: xml_file %q: %w", ErrInvalidWork, l.XMLFile, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("%w: xml_file %q: %w", ErrInvalidWork, l.XMLFile, err)
	}
	return string(b), nil
}

// checkWork reads what the target needs of a line's XML and refuses one
// that is not exactly the line's work.
func checkWork(doi, text string) (work, error) {
	w := work{DOI: doi, XML: text}
	got, err := scanXML(text)
	if enc, ok := errors.AsType[*encodingError](err); ok {
		return w, fmt.Errorf("%w: DOI %s: %w", ErrInvalidWork, doi, enc)
	}
	if err != nil {
		return w, fmt.Errorf("%w: DOI %s: the deposit XML is not well-formed: %w", ErrInvalidWork, doi, err)
	}
	switch {
	case len(got.dois) == 0:
		return w, fmt.Errorf("%w: DOI %s: the deposit XML has no doi_data", ErrInvalidWork, doi)
	case len(got.dois) > 1:
		return w, fmt.Errorf("%w: DOI %s: the deposit XML holds %d works (doi_data: %s): a line is one work, so split the file into one deposit per DOI",
			ErrInvalidWork, doi, len(got.dois), strings.Join(got.dois, ", "))
	case !strings.EqualFold(got.dois[0], doi):
		return w, fmt.Errorf("%w: the line's DOI %s is not the DOI of its XML's doi_data, %s", ErrInvalidWork, doi, got.dois[0])
	case got.batchID == "":
		return w, fmt.Errorf("%w: DOI %s: the deposit XML has no head/doi_batch_id", ErrInvalidWork, doi)
	}
	ts := got.timestamp
	n, err := strconv.ParseUint(ts, 10, 64)
	if err != nil || len(ts) > 19 || strings.Trim(ts, "0123456789") != "" {
		return w, fmt.Errorf("%w: DOI %s: head/timestamp %q is not a number of at most 19 digits: the file must carry its own version (deposit never stamps a clock)",
			ErrInvalidWork, doi, ts)
	}
	w.BatchID, w.Timestamp = got.batchID, n
	return w, nil
}

// scanned is what scanXML reads of a deposit.
type scanned struct {
	dois               []string // each doi_data's doi, in order
	batchID, timestamp string   // the first of each, trimmed
}

// scanXML reads a deposit XML in one pass.
func scanXML(text string) (scanned, error) {
	var s scanned
	dec := xml.NewDecoder(strings.NewReader(text))
	dec.CharsetReader = func(label string, r io.Reader) (io.Reader, error) { return charset(text, label, r) }
	var path []string
	var chars strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return s, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			path = append(path, t.Name.Local)
			chars.Reset()
			if t.Name.Local == "doi_data" {
				s.dois = append(s.dois, "")
			}
		case xml.CharData:
			chars.Write(t)
		case xml.EndElement:
			s.ended(path, strings.TrimSpace(chars.String()))
			path = path[:len(path)-1]
			chars.Reset()
		}
	}
	if len(path) != 0 {
		return s, errors.New("unexpected end of the document")
	}
	return s, nil
}

// asciiLabels are the names of US-ASCII, lower case: IANA's name and
// aliases (https://www.iana.org/assignments/character-sets/character-sets.xhtml)
// and "ascii", which Java's charset and libxml2 take as well.
var asciiLabels = map[string]bool{
	"us-ascii": true, "ascii": true, "iso-ir-6": true, "ansi_x3.4-1968": true, "ansi_x3.4-1986": true,
	"iso_646.irv:1991": true, "iso646-us": true, "us": true, "ibm367": true, "cp367": true, "csascii": true,
}

// encodingError is a deposit XML whose declared encoding Crossref cannot
// take: all XML it is sent must be UTF-8
// (https://www.crossref.org/documentation/register-maintain-records/direct-deposit-xml/).
// US-ASCII is a subset of UTF-8, so a file that declares it is taken as
// long as each byte is below 0x80.
type encodingError struct {
	label  string
	offset int  // of the first byte above 0x7F under a US-ASCII label; -1 otherwise
	b      byte // that byte
}

func (e *encodingError) Error() string {
	if e.offset >= 0 {
		return fmt.Sprintf("the deposit XML declares encoding %q but holds byte 0x%X at offset %d, which US-ASCII has not: Crossref takes UTF-8 only; declare encoding=\"UTF-8\"",
			e.label, e.b, e.offset)
	}
	return fmt.Sprintf("the deposit XML declares encoding %q: Crossref takes UTF-8 only (US-ASCII, a part of it, too); convert the file to UTF-8 and declare encoding=\"UTF-8\"", e.label)
}

// charset is the XML decoder's CharsetReader for text: under a US-ASCII
// label, r itself when every byte of text is ASCII (UTF-8 reads it the
// same); an *encodingError otherwise. The decoder takes UTF-8 without
// asking.
func charset(text, label string, r io.Reader) (io.Reader, error) {
	if !asciiLabels[strings.ToLower(strings.TrimSpace(label))] {
		return nil, &encodingError{label: label, offset: -1}
	}
	for i := range len(text) {
		if text[i] >= 0x80 {
			return nil, &encodingError{label: label, offset: i, b: text[i]}
		}
	}
	return r, nil
}

// ended notes the text of the element that path ends in.
func (s *scanned) ended(path []string, text string) {
	name := path[len(path)-1]
	switch {
	case name == "doi" && len(path) > 1 && path[len(path)-2] == "doi_data" && len(s.dois) > 0 && s.dois[len(s.dois)-1] == "":
		s.dois[len(s.dois)-1] = text
	case name == "doi_batch_id" && s.batchID == "":
		s.batchID = text
	case name == "timestamp" && s.timestamp == "":
		s.timestamp = text
	}
}

// volatile matches, in the deposit XML's bytes, the first element named
// doi_batch_id or timestamp (with or without a namespace prefix), its
// start tag, its content and its end tag.
var volatile = map[string]*regexp.Regexp{
	"doi_batch_id": regexp.MustCompile(`(?s)(<(?:[A-Za-z_][-.\w]*:)?doi_batch_id(?:\s[^>]*)?>).*?(</(?:[A-Za-z_][-.\w]*:)?doi_batch_id\s*>)`),
	"timestamp":    regexp.MustCompile(`(?s)(<(?:[A-Za-z_][-.\w]*:)?timestamp(?:\s[^>]*)?>).*?(</(?:[A-Za-z_][-.\w]*:)?timestamp\s*>)`),
}

// keyedXML is the XML the key covers: the content of the first
// doi_batch_id and of the first timestamp element removed, tags kept, every
// other byte as it is. A file regenerated with a new clock and batch id is
// then the same deposit.
func keyedXML(text string) string {
	for _, name := range []string{"doi_batch_id", "timestamp"} {
		if m := volatile[name].FindStringSubmatchIndex(text); m != nil {
			text = text[:m[3]] + text[m[4]:]
		}
	}
	return text
}
