// Package client provides exactly-once deposits: given a payload, it makes
// sure one record exists for it on the server and returns its identifier,
// whatever the network does.
//
// A deposit is "ensure a record exists for this key", not "create a record".
// The key is the SHA-256 of the payload's canonical bytes (package
// canonical), so every process on every machine computes the same key. Each
// deposit follows one order: look the key up in the store (package dedup; a
// finished key is answered from there with no request), record the intent
// (pending: outcome unknown), send the conditional write, classify the
// answer per the protocol table, and record the outcome only after the
// server confirmed it. A retry, a crash, a second process: none can create a
// second record, because the server arbitrates (If-None-Match: * or an
// Idempotency-Key) and "already exists" is a success.
//
// [New] builds a [Client] from a [Config] whose Target says where deposits
// go: a built-in target of the packages under target (put.Target,
// idempotencykey.Target, webdav.Target, s3.Target, couchdb.Target,
// datacite.Target, invenio.Target, dataverse.Target, crossref.Target), each
// with its own options, or a target
// of any package written against package driver; package client imports
// none of them. [Client.Deposit] deposits one payload and
// [Client.Run] a stream of them with bounded concurrency, which is what
// batch programs embed. Cancelling Run's context stops it gracefully: no
// request starts after that, and the answers already awaited are recorded
// within a grace period ([BatchOptions] Grace and OnStop).
//
// A deposit may be several steps (create, upload each file, publish, send
// an event). A target only builds each step's request and judges its
// answers; the client guards every step the same way: intent recorded before
// the step's first request, done only on the server's confirmation, a check
// (a read-back, a search) before an uncertain step of a server that
// arbitrates nothing is ever sent again, and a re-run that resumes at the
// first unfinished step.
//
// Errors say what to do with an item: [ErrInvalid] (fix the input), [ErrTerminal] (the server refused it; see
// the [HTTPError]), [ErrStopRun] (stop everything: credentials, endpoint),
// [ErrUnresolved] (run again; nothing can be created twice).
//
// Requests go through github.com/hashicorp/go-retryablehttp, but every wait
// is the client's own, decided by package backoff: capped, jittered waits
// that honour Retry-After, an attempt limit and an elapsed limit per step,
// and a retry budget shared by every deposit of the client. A wait ends at
// once when the context ends or the batch stops. The
// last answer is never lost, and nothing is logged unless a Logger is given.
//
// A credential in an endpoint's query string (?access_token=..., ?api_key=...)
// is sent with every request and kept nowhere else: the store's target name
// holds a digest of its value, record URLs used as identifiers leave it out,
// and logs and errors give no query at all. A header (Config.Header) is still
// the better place for it: a new token in the query is a new target name.
//
// Under the idempotency-key protocol, correctness rests on the server's own
// limits: it holds while the server keeps completed keys (the IRI reference:
// 24 h) and while its in-flight lock outlives the request (IRI: 60 s, not
// renewed). Resuming an uncertain item older than idempotencykey.Target.Retention logs a
// warning that names it.
package client
