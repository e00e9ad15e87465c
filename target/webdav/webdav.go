// Package webdav provides the webdav target: a WebDAV collection, written
// to with a conditional create. It stores what it is given and mints
// nothing: a record's identifier is its URL, and nothing is read back.
package webdav

import (
	"net/http"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/target/internal/record"
)

// Target is a WebDAV collection (Apache mod_dav, nginx's dav module, ...):
// a conditional PUT {Endpoint}/{key} with If-None-Match: *. Unlike the put target, a
// 409 means the parent collection does not exist (RFC 4918 section 9.7.1),
// which concerns every item, so the run stops.
type Target struct {
	// Endpoint is the collection URL. Required.
	Endpoint string
}

type webdavDriver struct{ endpoint string }

// Driver checks the options and returns the target's driver.
func (t Target) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("webdav.Target.Endpoint", t.Endpoint)
	return webdavDriver{ep}, err
}

func (d webdavDriver) Name() string              { return driver.TargetName(protocol.WebDAV, d.endpoint) }
func (d webdavDriver) StepTargets() []string     { return nil }
func (d webdavDriver) SecretFingerprint() string { return "" }
func (d webdavDriver) Guards(name string) bool   { return driver.Guarded(name) }

func (d webdavDriver) Steps(k canonical.Keyed, _ string) ([]driver.Step, error) {
	url := driver.RecordURL(d.endpoint, k.Key)
	return []driver.Step{{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build: record.ConditionalPut(url, k.Body),
		Judge: func(a driver.Answer) driver.Verdict {
			if a.Err == nil {
				switch a.Status {
				case http.StatusPreconditionFailed:
					return driver.Verdict{Class: driver.Exists}
				case http.StatusConflict:
					return driver.Verdict{Class: driver.Stop, Problem: "the collection " + parentCollection(url) + " does not exist"}
				}
			}
			v := driver.Verdict{Class: driver.Classify(a)}
			if v.Class == driver.Created && a.Status != http.StatusCreated {
				v.Warn = record.IgnoredConditionWarning
			}
			return v
		},
		Fallback: credential.Strip(url),
	}}, nil
}

// parentCollection is the URL of the collection a record URL is in.
func parentCollection(record string) string {
	dir, _, _ := strings.Cut(record, "?")
	return driver.RedactURL(dir[:strings.LastIndex(dir, "/")+1])
}

// ProbeRemoval removes a probe record (driver.Prober).
func (d webdavDriver) ProbeRemoval(created driver.Answer) (driver.Request, error) {
	return record.Delete(created)
}

// The driver's optional capabilities, checked when the package compiles:
// the engine finds one by a type assertion, so a method misnamed would
// silently turn it off.
var _ driver.Prober = webdavDriver{}
