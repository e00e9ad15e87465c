package driver

import "github.com/depositkit/deposit/canonical"

// Updater is a Driver whose records can be replaced in place on a
// condition the server checks, so that an object (a payload named by an
// identity, [canonical.Keyed.Object]) keeps one record and each new
// content of it is applied once.
//
// With an identity, the engine creates an object's record with the steps
// [Driver.Steps] returns for the object key: the Keyed it passes has Key
// set to the object key, so the record's name (a URL, a document id) is
// the object's, and the record carries its own marker. The payload's
// content key names the version; the engine keeps, per object, the
// version the server holds and its tag ([Verdict.Tag] of the create or
// the update that applied it).
//
// A later content of the object is an update: the engine records its
// intent, sends Update(k, tag) and judges the answer with JudgeUpdate:
//
//   - [Created]: the server replaced the record; [Verdict.Tag] is the tag
//     of the new version ("" when the answer names none: the engine reads
//     the record before the next update).
//   - [Conflict]: the server's precondition failed (a 412 to If-Match, a
//     CouchDB 409 for a stale _rev): the record is not at tag. The
//     engine reads it (ReadObject): holding this very content, the update
//     had taken effect (an earlier attempt's); holding a version this
//     object is known to have had, the engine takes its tag and sends the
//     update again; anything else is another writer's change, reported
//     failed, never overwritten.
//   - every other class as a create's: [Ambiguous] is sent again as it
//     is, which the condition makes safe (an attempt that took effect
//     answers Conflict, and the read finds this content).
//
// An update is arbitrated by its condition. A target whose server checks
// none is an Updater only as a [ReadBeforeUpdate], which reads the record
// before every update.
type Updater interface {
	ObjectReader
	// Update is the request that replaces the record of object k.Object
	// with k's content, on the condition that the server holds the
	// version tagged tag; tag is never "" (the engine reads first), but
	// for a [ReadBeforeUpdate].
	Update(k canonical.Keyed, tag string) (Request, error)
	// JudgeUpdate classifies an answer to Update (see above). It must be
	// a pure function of the answer, like [Step.Judge].
	JudgeUpdate(a Answer) Verdict
}

// ObjectReader reads an object's record, as every target that takes an
// identity must: to settle an update whose answer was lost, and to learn
// the version a record holds when the store does not know it.
type ObjectReader interface {
	// ReadObject is the request that reads the record of object
	// k.Object as the server holds it now.
	ReadObject(k canonical.Keyed) (Request, error)
	// JudgeRead reads the answer to ReadObject: [Present] with the
	// record's payload and tag in the ObjectState, [Absent] when there
	// is no record (a 404), [Foreign] for a record that is not a
	// deposit's, and [Unknown] with [Finding.Class] for an answer that
	// settles nothing. A pure function of the answer.
	JudgeRead(a Answer) (ObjectState, Finding)
}

// ObjectState is what the server holds of an object's record: its
// payload, as it was deposited (the engine keys it in the client's
// canonical form, to learn the version and check that the record is this
// object's), and the server's tag of that version (an ETag, a revision).
type ObjectState struct {
	Body []byte
	Tag  string
	// Version and Object, for a record that names them in markers of its
	// own (DataCite's alternate identifiers), are the content key of the
	// version it holds and the object key it belongs to: the engine takes
	// them instead of keying Body, whose shape such a server changes.
	// Version "" means Body is the payload as deposited, to be keyed.
	Version, Object string
	// RecordID, for a [StepUpdater]'s record, is what a line reports as
	// its record id for the version read (a Dataverse version number, an
	// InvenioRDM version's record id): the engine gives it to a line
	// whose update a killed run had already applied.
	RecordID string
	// Order, for a record that names neither its content nor markers
	// but the order of its version (Crossref's deposit timestamp), is
	// that order, as the version pointer gives it (a decimal integer or
	// an RFC 3339 time); Body and Version are "" then. See
	// [ReadBeforeCreate].
	Order string
}

// ReadBeforeCreate is a [StepUpdater] whose server keeps one record per
// name and takes a deposit to a name it holds as that record's next
// version, refusing one whose order (the version pointer's value) is not
// greater than the one it holds (Crossref's timestamp rule): its create
// and its update are one request. The engine reads the record before the
// create too, and its read names the order held ([ObjectState.Order]):
//
//   - an order equal to the payload's is the payload's version (the
//     server refuses a second version of one order);
//   - a greater order makes the payload stale, and nothing is sent;
//   - a smaller one is a version the payload follows: its create is
//     reported updated when the read found a record.
//
// A version the store never applied (its store lost, a deposit by
// another tool) is known by its order alone. A terminal answer to a
// create or an update is read again: a record now at an order not less
// than the payload's is the server's rule refusing it, stale, not failed.
type ReadBeforeCreate interface {
	ReadsBeforeCreate() bool
}

// Identified is a Driver whose payloads name their object themselves
// (Crossref's line: a work's DOI, its versions ordered by the file's
// timestamp): without a client identity, the client names objects by
// the pointers Identity returns, into [canonical.Keyed.Body] as the
// driver's Payloader builds it, and orders versions by version ("" for
// none). A client identity other than this one is refused.
type Identified interface {
	Identity() (pointers []string, version string)
}

// ReadBeforeUpdate is an Updater whose server checks no precondition on
// an update (DataCite's PUT of a DOI's metadata). The engine then reads
// the record before every update and sends it only while the record holds
// the version the store recorded, by its version marker
// ([ObjectState.Version]); Update is given the tag the read named, "" when
// it named none. What this cannot catch is a write by another tool
// between the read and the update: the page of such a target must say so.
type ReadBeforeUpdate interface {
	ReadsBeforeUpdate() bool
}

// StepUpdater is a target whose update of a record takes several writes
// (InvenioRDM's edit: open the record's edit draft, save the new metadata
// in it, publish it; Dataverse's draft version, its files, its
// publication), none of them conditional on the version the record holds.
// A target is an Updater or a StepUpdater, not both.
//
// The engine reads the record before every update, as for a
// [ReadBeforeUpdate], and goes on only while it holds the version the
// store recorded (by [ObjectState.Version], or by keying its body). It
// then runs the steps UpdateSteps returns as it runs a deposit's: in
// order, each guarded by its own store row (its intent before its first
// request, its Check before a request that may have taken effect is sent
// again, answered from the store on a re-run), under the object's lease.
// Once the primary step is confirmed, the object holds k's version, and
// the primary step's identifier is the record's from then on (the record
// of a new version, or the same one).
//
// An update's steps are keyed by [ObjectUpdate.Key], one per application
// of a version to the object, or by that key, a space and a name of the
// step's own (one per file), under store targets of the driver's own
// ([Driver.StepTargets]), never [Driver.Name]: an update makes no new
// deposit. When a read shows that a killed run's update took effect, the
// engine closes the rows so keyed that it left pending, as done, sending
// nothing. Their requests should carry k's version marker, so that a read
// of the record after a lost answer, or after a lost store, tells the
// version applied. A step that finds what only another writer can have
// made (an edit draft without this object's marker) says so as [Foreign]
// rather than taking it over.
type StepUpdater interface {
	ObjectReader
	// UpdateSteps returns the steps that apply k's content (k.Key is its
	// content key, k.Object the object's key) to the object's record.
	UpdateSteps(k canonical.Keyed, u ObjectUpdate) ([]Step, error)
}

// RecordReader is an [ObjectReader] whose records the server names (a
// Dataverse dataset's persistent identifier, an InvenioRDM record id), so
// that the object key alone finds none: the engine reads the record by the identifier the
// store holds for the object, or that the create's steps just settled,
// and calls ReadRecord instead of ReadObject.
type RecordReader interface {
	ReadRecord(k canonical.Keyed, record string) (Request, error)
}

// ObjectUpdate is what a [StepUpdater]'s update is built from.
type ObjectUpdate struct {
	// Key is the deposit key of the update's step rows: one per
	// application of a version (a version applied again, after an
	// allowed revert, has a key of its own).
	Key string
	// Record is the identifier of the object's record, as the store
	// holds it: the primary step's of its last update, or its create's.
	Record string
	// Held is the record as the engine read it just before: it holds the
	// version the store recorded.
	Held ObjectState
	// Dir is the base folder of a dataset's files ("" for a record), as
	// [Driver.Steps] is given it.
	Dir string
}

// ContentMatcher is an [ObjectReader] that tells whether a record it
// judged [Foreign] because it carries no deposit's marker (a DOI
// registered before deposit was used) holds the payload's content all the
// same. The engine asks only when it meets the record at the object's
// first version (its create found it there); a record that does is that
// version, existing, and is not changed. A later version of the object
// meets the Foreign record again, and fails as before.
type ContentMatcher interface {
	HoldsContent(k canonical.Keyed, a Answer) bool
}
