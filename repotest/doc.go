// Package repotest provides a reference repository server with fault injection,
// for testing deposit clients the way net/http/httptest serves HTTP clients.
//
// NewServer starts a server on 127.0.0.1 with a random port; point a client at
// Server.URL, use Server.Client, assert on Server.Stats and Server.Records, and
// Close it. NewHandler gives the same repository as an http.Handler for any
// listener (`deposit serve`).
//
// # Protocols
//
// Under ProtocolPut (the default), PUT /{key} with If-None-Match: * creates the
// record once: 201 with {"identifier":...,"key":...} and a Location naming the
// record. A PUT to an existing key answers 412 with an empty body; a PUT without
// If-None-Match answers 428; with Config.VerifyKey a key that is not the SHA-256 of
// the body answers 422. GET /{key} reads a record back: 200 with
// {"identifier","key","created","metadata"}, metadata being the stored body, or 404.
// DELETE /{key} removes the record (every version of it, under
// IgnoreIfNoneMatch): 204, or 404 when there is none (Stats.Deletes); a PUT
// to the key then creates it anew, and its identifier is never minted again.
//
// Under ProtocolIdempotencyKey, POST to URL (or any path: the path names the
// resource) with an Idempotency-Key Structured Field string creates a record and
// answers 201 {"id":...} with Idempotency-Key-Reply: miss. A retry with the same key
// and body replays that answer, byte for byte, with Idempotency-Key-Reply: hit. It
// follows the IETF draft and the IRI facility API's Python reference: the key is
// locked while its request is in flight (Config.LockTTL, default 60s, not renewed)
// and a concurrent request gets 409; a completed key is replayed for
// Config.ResultTTL (default 24h from creation, not renewed by hits); a completed key
// with a different body gets 422, the bodies compared as parsed JSON re-encoded with
// sorted member names (whitespace and member order do not count; number spelling
// does); a missing key gets 400 unless Config.IdempotencyKeyOptional; any key gets
// 501 under Config.IdempotencyDisabled. Where it differs from the IRI reference:
//
//   - 409 carries Retry-After: 1 (IRI sets a value but its error handler drops it).
//   - The cache key includes the request path, so one key used on two resources
//     does not replay the first resource's answer.
//   - The header is parsed as an RFC 8941 string: an unquoted, empty, parameterised
//     or repeated key is a 400 (IRI uses the raw header value, and an empty value
//     bypasses idempotency).
//   - It answers 201, not 200, and mints a record rather than running a job;
//     there is no read-back under this protocol (GET is a 405).
//
// Both protocols answer errors as application/problem+json (RFC 9457); other
// answers a client may meet: 405 for another method, 413 for a body over
// Config.MaxBodyBytes, 415 for a Content-Type that is not JSON, 400 for a body that
// is not JSON, 401 and 403 with Config.Authorization.
//
// Identifiers are minted by the server, "10.5072/dk." and a suffix mixed from the
// seed and a counter, never from the key, so a client that loses an identifier
// and re-derives it is caught.
//
// # Faults
//
// Config.Faults (and `deposit serve --faults`) is a comma-separated list of rules:
//
//	drop=P          commit the record, then close the connection without answering
//	reset=P         close the connection without answering and without committing
//	500=P 502=P 504=P
//	                answer that status before committing
//	503=P 429=P     the same, with :retry-after=SECONDS or :retry-after-date=SECONDS
//	                for a Retry-After in seconds or as an HTTP-date
//	409=P           answer 409 "in flight" with Retry-After: 1 before committing
//	slow=P          commit, then trickle the body a byte at a time (:every=10ms)
//	latency=D       delay every create by the duration D before it commits
//	nth=N:KIND      the Nth request (from 1) for a key gets KIND, with its parameters
//	reads           faults also apply to GET reads (counted per key separately)
//
// for example "drop=0.15,503=0.1:retry-after=1,429=0.05,500=0.05,latency=2ms,nth=3:drop".
// The probabilities add up to at most 1. Each create draws one number from
// SHA-256(seed, key, attempt), where attempt counts the requests for that key
// (under idempotency-key, the path and the key), so the faults do not depend on
// arrival order: a run at concurrency 8 meets the same faults as at 1. An nth rule
// overrides the dice for its attempt. FaultsHelp holds this text for a --help.
// Faults apply to requests that reach the protocol: not to 401, 403, 404, 405, 413,
// or a missing, malformed or refused (501) Idempotency-Key; each such request still
// counts in Stats.Requests but not as an attempt. A drop or slow fault applies to
// the answer of the create step (201, 200, 412, a replayed hit); validation errors
// (400, 415, 422, 428) and genuine 409s are answered plainly. Under put, an
// attempt is any PUT to the key; with "reads", GETs of a key are numbered apart,
// and DELETEs of a key are always numbered apart from its PUTs: a drop removes
// the record, then hangs up.
//
// Note that Go's http.Transport itself retries, once and silently, a request that
// carries an Idempotency-Key header when a reused connection closes before any
// answer; a drop under idempotency-key can therefore reach a Go client as a hit.
//
// # Counters
//
// Stats counts requests, creates, replays, genuine 409 conflicts, faults by kind,
// records, and duplicates: a record created when an earlier one already had the
// same key (put, Config.IgnoreIfNoneMatch), the same path and Idempotency-Key (an
// expired lock or result), or the same body, compared as JSON without the
// top-level members named in Config.DuplicateIgnore. A client that changes its key
// on retry, or keys on a volatile field, shows up there.
//
// # Durability
//
// With Config.DBPath the records live in the server's own SQLite file and survive
// a restart: a PUT to an old key answers 412, a GET returns the same identifier,
// and a retried Idempotency-Key still replays within ResultTTL. The file is
// identified before anything writes to it; a file of another program is refused
// with ErrNotServerStore. Locks and fault attempt counters are in memory only, so
// a restart resets the fault sequence and frees every lock.
//
// # What it does not emulate
//
// It is one process with every record also in memory, not a repository: no
// authentication scheme beyond one fixed Authorization value, no users (IRI keys
// results per user; here all clients share one key space), no versions, updates
// or ETags, no deletes but of a whole record under put, no file uploads or multipart bodies, no metadata validation
// beyond "is JSON", no HTTP/2 (a drop then aborts the stream), no TLS, no rate
// limiting other than injected 429s, no partial writes or torn records, no
// clock skew in Retry-After dates, and no crash between commit and store (the
// record and its persistence are one step). Records are never expired; only the
// idempotency replay is.
package repotest
