// Package driver provides the contract between the deposit engine (package
// client) and the targets it deposits to, as database/sql/driver stands
// beside database/sql.
//
// A target is any value with a method Driver() (driver.Driver, error),
// given to client.New as Config.Target. Its [Driver] turns each payload
// into a list of [Step] values: what to send ([Step.Build]) and what an
// answer means ([Step.Judge]). The engine decides when to send, wait,
// retry, record and report; a driver never sends a request itself and
// never calls back into the engine. This page is what a driver's author
// must know of what the engine promises and expects. The built-in targets
// (the packages under target, such as target/put and target/invenio) are
// written against this package alone, as a target of one's own is.
//
// # Judging answers
//
// A Judge, and a [Check]'s Judge, must be a pure function of the [Answer]
// alone: no state kept between calls, no body rewritten for a later
// reader. [Classify] is the part of the protocol table every target
// shares; a driver starts from it and overrides what its protocol means
// otherwise.
//
// The classes split what may have happened from what did not:
//
//   - [Created] and [Exists]: the step took effect, by this request or an
//     earlier one. A durable step's identifier is [Verdict.ID], else
//     [Step.FallbackID]: [Step.FallbackFrom] given the earlier steps'
//     identifiers, or [Step.Fallback]; a Created with none is treated as
//     Ambiguous.
//   - [Retry]: the request did not take effect (429, 503, an idempotency
//     key still in flight): it is sent again as it is.
//   - [Ambiguous]: it may have taken effect (500, 502, 504, a timeout, a
//     connection lost after the request was written, an answer that is no
//     confirmation). An arbitrated step is sent again as it is; any other
//     step is looked for by its Check first.
//   - [Conflict]: the step took effect only if its Check finds it (a 409
//     that may be a missing parent as well as an existing record).
//   - [Terminal]: refused for good; the failure is recorded and the
//     deposit reported failed, never sent again unless the caller asks.
//   - [Stop]: the answer concerns every item (credentials, endpoint,
//     an unsupported method): the run stops.
//   - [Accepted]: the server took the request and settles it later (a
//     publication finished in the background, a queued deposit, a review
//     sent to a curator): it is never sent again, and the step's Check is
//     polled (see below). Only a step that declares [Step.Accepts] may be
//     answered so; for any other the run stops.
//   - [Canceled] is the engine's own (its context ended); a Judge does
//     not return it.
//
// # When a step needs a Check
//
// A Check finds out whether a step took effect: a read-back of the
// record, a search for a marker the payload carries. The engine runs it
// after an [Ambiguous] answer to a step that is not arbitrated, before the
// first request of such a step when the store shows an earlier attempt,
// after an [Exists] that names no identifier, and after a [Conflict]. A
// [Present] finding settles the step with [Finding.ID]; [Absent] lets the
// engine send the request (after an ambiguous attempt, only once the check
// has looked again [Check.Settle] later); [Foreign] is terminal; [Unknown]
// is looked at again if its [Finding.Class] is retryable, else leaves the
// deposit unresolved (or stops the run, for [Stop]); [Pending] says the
// step was accepted and has not settled: the engine polls, as below.
//
// A check may take several requests: a finding with [Finding.Then] says
// that its answer settles nothing alone, and the engine looks further
// with that check (a search that missed, then the collection's listing,
// then each record in it), taking the last finding as the check's. The
// judge builds Then from its answer, so it stays pure, and bounds its own
// chain (ExampleFinding_then pages a listing so). Each look is retried
// within the retry policy's attempt limit of its own, and a look whose
// answer the judge could read spends none of the step's attempts
// (MaxAttempts), which are its own requests': a step with a check gets as
// many writes per run as an arbitrated one. A check's requests, and its
// settle wait, do count against the step's elapsed limit (MaxElapsed,
// counted from the step's first request), and their retries against the
// client's retry budget; a look that ends [Unknown] leaves the deposit
// unresolved.
//
// A check's answers carry [Answer.Since], when the step was first
// attempted (its intent as the store journaled it, in this run or an
// earlier one): a record the server made before then is not its effect,
// so a listing read newest first may stop at the first older record (less
// a margin for clock skew) instead of paging the whole account. Since is
// zero after an [Exists] or a [Conflict], whose record may be older; the
// check must then look at everything.
//
// A 200 whose body is not what the check reads (a login page, a body cut
// short) is [Unknown] with the class [Classify] gives it, [Created]; a
// success class is no class for a look, and the engine takes it as
// [Ambiguous]: looked at again within the look's attempt limit, then left
// unresolved.
//
// # A step accepted to settle later
//
// After an [Accepted] answer the engine records nothing as done and polls
// the step's Check, within [Check.Poll] (by default the client's retry
// policy's MaxElapsed) counted from that answer, waiting between polls as
// between retries: the retry policy's capped backoff, or the last
// answer's Retry-After (capped too). [Present] confirms the step as
// created, with [Finding.ID]; [Foreign] is terminal. [Pending] and
// [Absent] settle nothing (an accepted step may not show yet): the engine
// polls again, and when the budget ends the deposit is unresolved, with an
// error saying "accepted, not yet settled" (client.ErrUnresolved), and its
// intent stays pending. A [Pending] finding of any check means the same,
// also that of the check a later run makes first: a step that declares
// [Step.Accepts] is looked for before anything else when its row shows
// an earlier attempt, and it is polled, never sent again, while the check
// says Pending. On a later run, an [Absent] is what it is for any step the
// server does not arbitrate: trusted after [Check.Settle], and the
// request sent.
//
// # What the flags promise
//
// [Step.Arbitrated] promises that the server itself refuses a second
// effect of the same request (a conditional create, an Idempotency-Key):
// the engine then retries an ambiguous answer without looking. Claim it
// only when that is true of every retry, after a restart too.
//
// A state change the server refuses to make twice (a publish answered 400
// "already published" the second time) is arbitrated: the second request
// has no effect, and the state it asks for holds. Judge that refusal
// [Exists], which is what Exists means (the step had taken effect
// already), as DataCite's event step takes a second "publish" of a
// findable DOI; match it by what the server says (a code, a message),
// never by the status alone, since a 400 is also a request refused for
// good ([Terminal]). Its answer names no identifier: give the step
// [Step.FallbackFrom] (the record the create made) or a Check. Do not
// claim it where a repeat may act again (a publish that makes a new
// version when the record changed in between): give the step a Check.
//
// [Step.Durable] gives the step a store row: its intent is recorded
// before its first request and it is done only on the server's
// confirmation, so a re-run answers it from the store and a crash leaves
// a row that says the request may have been sent. [Step.KeepBody] stores
// the payload first deposited in the primary step's intent row, and every
// later attempt, after a restart too, builds its steps from that payload:
// a Build that depends only on Keyed.Body re-sends the bytes first sent.
// Use it where the server compares a retried body with the first (an
// Idempotency-Key), or where a payload that keys the same may carry
// another version (a regenerated Crossref file with a new <timestamp>).
//
// # Rules for a list of steps
//
// The engine checks each deposit's steps before its first request and
// stops the run (client.ErrStopRun) when they break a rule, since the
// mistake is the driver's and the same for every item:
//
//   - at least one step, and exactly one [Step.Primary], which is durable;
//   - every step has Build (or Parts) and Judge, and every step but the
//     primary one a Label;
//   - a durable step has a store row (Target and Key), and no two durable
//     steps share one;
//   - every step is durable or arbitrated (or both): with neither, nothing
//     would record that it may have been sent, and the server would not
//     refuse a second effect;
//   - a durable step that is not arbitrated has a Check;
//   - only the primary step keeps its body;
//   - a step that Accepts is durable and has a Check;
//   - a step with a Recheck row has a Check and is not arbitrated;
//   - a step that names the RecordID is durable;
//   - a step sent in [Parts] is arbitrated, not durable, and has all of
//     Parts' functions but Held.
//
// Name the store target of a step other than the primary one by
// [StepTarget] (the deposit's target with "-step" after the protocol,
// "articles-publish <endpoint>" beside "articles <endpoint>"): `deposit
// status` counts the rows under such a target as steps of the deposits,
// not as deposits of their own.
//
// # Optional capabilities
//
// As with database/sql/driver, optional behaviour is an interface the
// engine looks for on the Driver:
//
//   - [TransportWrapper] (a signer): wrapped around the client's
//     transport, beneath the engine's rate limit, so it sees every attempt.
//   - [RateSetter]: the default request rate when the caller sets none.
//   - [RequestPacer]: a rate of its own for some requests (a search
//     endpoint's limit), waited for before the request takes a slot.
//   - [FileMD5er]: the keyer hashes each dataset file with MD5 too, in the
//     same read, for a server that reports files by MD5.
//   - [Seeder]: a lost store is recovered by scanning the server for the
//     markers its deposits carry. Before a deposit the store knows nothing
//     of, the engine makes sure the store holds a scan of the server (once
//     per store, kept whole or not at all, the other processes waiting),
//     and seeds the deposit's rows from the records found with its marker,
//     so that a batch run again after its store was lost creates nothing
//     new; a scan that cannot reach every record stops the run. Every
//     store that holds no scan yet, a new one as well as one that was lost,
//     waits ScanSettle and scans the whole account before its first
//     deposit: budget for it in a first run. [Seeder] says how pages
//     combine. A target
//     that arbitrates nothing and has no Seeder is reconciled per step, by
//     its checks, while its store holds the deposits' rows; a run on an
//     empty store sends afresh what an earlier, lost store had recorded.
//   - [ChainSeeder]: a Seeder whose scan is a chain of requests, each
//     built from the answers before it (a listing of what the server
//     holds, then a read of each record the search does not show).
//   - [Payloader]: a payload read and keyed its own way: the body the
//     steps receive, and the text the key covers, which may leave out
//     what an ignore pointer cannot reach (the clock inside Crossref's
//     deposit XML).
//   - [Serializer]: deposits whose keys differ but that must not run at
//     once (new versions of one record, which share the server's one open
//     draft) name what they share; the engine runs them one at a time,
//     within a process by a lock and across processes by a lease.
//   - [FileParter]: the keyer hashes large dataset files in parts too,
//     for a step that sends them in [Parts].
//   - [Prober]: client.NewProbe may probe the target, writing a record
//     twice with its one conditional create and removing it after.
//   - [Updater]: the target takes an identity (client.Config.Identity):
//     an object's record is created by the steps of its object key
//     ([canonical.Keyed.Object] in Keyed.Key's place) and each later
//     version replaces it on a precondition the server checks (If-Match on
//     the tag the create's or the last update's [Verdict.Tag] named, a
//     revision). Its judge says what a failed precondition is
//     ([Conflict]: the engine reads the record with ReadObject, keys the
//     payload JudgeRead gives, and settles, retries on the tag read, or
//     reports another writer's change). A server with no precondition
//     is an Updater only as a [ReadBeforeUpdate], read before every
//     update.
//   - [StepUpdater]: the target takes an identity, and an update of a
//     record is several steps (an edit draft opened, saved, published),
//     run as a deposit's are once a read shows the record holding the
//     version the store recorded.
//
// Each is checked by a type assertion on the Driver value, so a method
// misnamed silently turns its capability off: assert it where the driver
// is declared (var _ driver.Seeder = myDriver{}).
//
// # Helpers
//
// A target's own package may use what the built-in targets share:
// [Endpoint] (a normalised endpoint) with [TargetName] and [RecordURL],
// [Identifier], [Pointers] and [MissedPointer] (the identifier rule),
// [Problem] and [OneLine] (an error body in one line), [IdempotencyKey] and
// [SecretFingerprint], [DatasetFiles] and [SizedFile] (a dataset's files),
// [Guarded] (the headers every built-in target reserves).
package driver
