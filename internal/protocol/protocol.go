// Package protocol provides the names of the deposit protocols, shared by
// the client, the command line and the reference server so that the three
// spell each protocol the same way without the server importing the client
// it is there to test.
package protocol

import (
	"fmt"
	"strings"
)

// The protocol names, as the command line's --protocol takes them and as
// the store's target names begin.
const (
	Put            = "put"
	IdempotencyKey = "idempotency-key"
	WebDAV         = "webdav"
	S3             = "s3"
	CouchDB        = "couchdb"
	DataCite       = "datacite"
	Invenio        = "invenio"
	Crossref       = "crossref"
	Dataverse      = "dataverse"
	OSF            = "osf"
	Figshare       = "figshare"
)

// RecheckSuffix ends the protocol part of a store target whose rows are
// notes, not deposits: "invenio-recheck <endpoint>" notes each record
// created after a search for it had found nothing, which the next run
// searches for again. Such a row is pending until then.
const RecheckSuffix = "-recheck"

// IsRecheck reports whether the store target names such notes.
func IsRecheck(target string) bool {
	proto, _, _ := strings.Cut(target, " ")
	return strings.HasSuffix(proto, RecheckSuffix)
}

// DraftStep names the step that makes an InvenioRDM draft: the store target
// "invenio-draft <endpoint>" holds a step of each published deposit, or the
// deposits themselves where the batch stops at drafts (no publish row for
// the endpoint).
const DraftStep = "draft"

// Step splits the protocol part of a store target into the protocol and the
// step it names. A deposit's own target gives the step "": "invenio
// <endpoint>" is ("invenio", ""); the target of one of its other steps is
// named protocol-step: "invenio-file <endpoint>" is ("invenio", "file"),
// "datacite-publish <endpoint> <prefix>" is ("datacite", "publish"). The
// rest of the name (endpoint, and prefix for DataCite) is the same for a
// deposit and its steps, and is returned as rest. A target whose protocol
// part is no known protocol gives that part as proto and the step "".
func Step(target string) (proto, step, rest string) {
	head, rest, _ := strings.Cut(target, " ")
	for _, n := range Names() {
		if head == n {
			return n, "", rest
		}
		if s, ok := strings.CutPrefix(head, n+"-"); ok {
			return n, s, rest
		}
	}
	return head, "", rest
}

// Names returns every protocol name, in the order help texts give them.
func Names() []string {
	return []string{Put, IdempotencyKey, WebDAV, S3, CouchDB, DataCite, Invenio, Dataverse, OSF, Figshare, Crossref}
}

// Parse returns the protocol named s; "" is Put.
func Parse(s string) (string, error) {
	if s == "" {
		return Put, nil
	}
	for _, n := range Names() {
		if s == n {
			return n, nil
		}
	}
	names := Names()
	return "", fmt.Errorf("unknown protocol %q: want %s or %s", s, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}
