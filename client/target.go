package client

import (
	"fmt"
	"net/textproto"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/steprules"
)

// Target is where deposits go and how each one becomes requests: the
// Target of one of the packages under target (put, idempotencykey, webdav,
// s3, couchdb, datacite, invenio, dataverse, crossref, osf, figshare), each a struct of
// its own options, or a
// target of any package written against the step contract of package
// driver. A target turns a
// payload into the steps of its deposit and judges the answers; the
// [Client] decides when to send, wait, record and report. Target values are
// read-only once given to [New].
type Target interface {
	// Driver checks the target's options and returns what the engine
	// drives; an error is a configuration error, reported by New.
	Driver() (driver.Driver, error)
}

// source is where a deposit's steps come from: the target's steps for a
// payload (dir is the base folder of a dataset's files, "" for a record),
// or, with update set, the steps of an object's update
// (driver.StepUpdater), given the payload.
type source struct {
	dir    string
	update func(k canonical.Keyed) ([]step, error)
}

// stepsOf is the target's steps for k, from src. A payload that is not a document
// is refused for every target when it is keyed (KeyPayload), and here
// again for the body an earlier attempt kept (keptSteps); the target's own
// check refuses what a record does not take (an array).
func (c *Client) stepsOf(k canonical.Keyed, src source) ([]step, error) {
	var steps []step
	var err error
	if src.update != nil {
		steps, err = src.update(k)
	} else {
		steps, err = c.target.Steps(k, src.dir)
	}
	if err != nil {
		return nil, err
	}
	if err := steprules.Check(steps); err != nil {
		// The target's own mistake, the same for every item: not this
		// payload's fault.
		return nil, fmt.Errorf("%w: the target's steps break the contract: %w", ErrStopRun, err)
	}
	if err := checkDocument(k.Body); err != nil {
		return nil, err
	}
	return steps, nil
}

// checkDocument refuses a payload that is a bare JSON string, number,
// true, false or null: a target would keep it as a document or record of
// its own, which no batch of records means. An object or an array is a
// document. The targets whose payload is a record (CouchDB, DataCite,
// InvenioRDM) refuse arrays too, each in its own check.
func checkDocument(body []byte) error {
	if kind := driver.JSONKind(body); kind != "an object" && kind != "an array" {
		return fmt.Errorf("the payload is %s, not a document: want a JSON object or array", kind)
	}
	return nil
}

// errHeaderGuarded is the error for a caller's header that a target sets
// itself.
func errHeaderGuarded(name string) error {
	return fmt.Errorf("%w: Config.Header %s: the target sets this header itself to make writes exactly-once", ErrConfig, textproto.CanonicalMIMEHeaderKey(name))
}
