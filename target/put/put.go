// Package put provides the put target: a repository that takes a
// conditional create (PUT with If-None-Match: *), such as a record store
// of one's own or repotest's server.
package put

import (
	"net/http"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/target/internal/record"
)

// Target is a repository that takes a conditional create: PUT {Endpoint}/{key}
// with If-None-Match: *. 201 is created; 412, and a 409 whose read-back
// (GET {Endpoint}/{key}) finds the record, mean it exists.
type Target struct {
	// Endpoint is the collection URL. Required.
	Endpoint string
	// IDPointer is the JSON Pointer of the identifier in an answer;
	// default /identifier. Without one, the identifier is Location, else
	// the record URL. A pointer set here that names no string in a JSON
	// answer is logged once as a warning.
	IDPointer string
}

type putDriver struct {
	endpoint string
	pointers []string
	// userPointer is the IDPointer the user set, "" for the default.
	userPointer string
}

// Driver checks the options and returns the target's driver.
func (t Target) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("put.Target.Endpoint", t.Endpoint)
	if err != nil {
		return nil, err
	}
	ptrs, err := driver.Pointers(t.IDPointer, "/identifier")
	return putDriver{endpoint: ep, pointers: ptrs, userPointer: t.IDPointer}, err
}

func (d putDriver) Name() string              { return driver.TargetName(protocol.Put, d.endpoint) }
func (d putDriver) StepTargets() []string     { return nil }
func (d putDriver) SecretFingerprint() string { return "" }
func (d putDriver) Guards(name string) bool   { return driver.Guarded(name) }

func (d putDriver) Steps(k canonical.Keyed, _ string) ([]driver.Step, error) {
	url := driver.RecordURL(d.endpoint, k.Key)
	return []driver.Step{{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build:    record.ConditionalPut(url, k.Body),
		Judge:    conditionalJudge(d.pointers, d.userPointer, credential.Strip(url)),
		Check:    record.ReadBack(url, d.pointers, d.userPointer, nil),
		Fallback: credential.Strip(url),
	}}, nil
}

// conditionalJudge judges the answers to a conditional create of a
// repository that mints identifiers. userPointer is the pointer the user
// chose, if any: an answer it names nothing in is warned about.
func conditionalJudge(pointers []string, userPointer, recordURL string) func(driver.Answer) driver.Verdict {
	return func(a driver.Answer) driver.Verdict {
		if a.Err == nil {
			switch a.Status {
			case http.StatusPreconditionFailed:
				id, _ := driver.StringAt(a.Body, pointers)
				return driver.Verdict{Class: driver.Exists, ID: id, Warn: driver.MissedPointer(userPointer, a.Body)}
			case http.StatusConflict:
				return driver.Verdict{Class: driver.Conflict}
			}
		}
		v := driver.Verdict{Class: driver.Classify(a)}
		if v.Class == driver.Created {
			v.Tag = a.Header.Get("ETag")
			v.ID = driver.Identifier(a.Body, a.Header, pointers, a.URL, recordURL)
			v.Warn = driver.MissedPointer(userPointer, a.Body)
			if a.Status != http.StatusCreated {
				v.Warn = record.IgnoredConditionWarning
			}
		}
		return v
	}
}

// Update replaces the record of object k.Object on its ETag: PUT
// {Endpoint}/{object key} with If-Match (driver.Updater). The server
// answers 2xx with the new version's ETag, or 412 when the record holds
// another version.
func (d putDriver) Update(k canonical.Keyed, tag string) (driver.Request, error) {
	return record.ConditionalUpdate(driver.RecordURL(d.endpoint, k.Object), k.Body, tag), nil
}

func (d putDriver) JudgeUpdate(a driver.Answer) driver.Verdict { return record.JudgeUpdate(a) }

// ReadObject reads the record of object k.Object: GET {Endpoint}/{object
// key}, answered with the payload (or the reference server's envelope
// around it) and its ETag.
func (d putDriver) ReadObject(k canonical.Keyed) (driver.Request, error) {
	return record.ReadObject(driver.RecordURL(d.endpoint, k.Object)), nil
}

func (d putDriver) JudgeRead(a driver.Answer) (driver.ObjectState, driver.Finding) {
	return record.JudgeRead(a)
}

// ProbeRemoval removes a probe record (driver.Prober).
func (d putDriver) ProbeRemoval(created driver.Answer) (driver.Request, error) {
	return record.Delete(created)
}

// The driver's optional capabilities, checked when the package compiles:
// the engine finds one by a type assertion, so a method misnamed would
// silently turn it off.
var (
	_ driver.Prober  = putDriver{}
	_ driver.Updater = putDriver{}
)
