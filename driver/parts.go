package driver

// Parts is how a step sends a large body in parts that survive a crash
// (S3's multipart upload), given as [Step.Parts]. Such a step is one step
// however many parts it has: it has no row of its own, and its Build may
// be nil. The engine runs it so:
//
//   - Held, when set, looks first for what the step makes (the object):
//     [Present] settles the step as existing, with nothing sent.
//   - With no upload journaled for the step, the uploads Strays lists are
//     aborted, and Begin starts one: the upload named by JudgeBegin's
//     [Verdict.ID] is journaled in the store before any part is sent.
//   - With one journaled, List reads the parts the server holds (paged:
//     ReadList's next part number, 0 on the last page). A part the
//     server holds with the tag journaled for it is not sent again; a
//     part the server holds with another tag than the one journaled is
//     an error (the deposit fails and the upload is aborted). An upload
//     the server no longer has (ReadList's gone) is forgotten and Held
//     looks again before a new one begins.
//   - Each missing part n (from 1 to Count) is sent with Part(upload, n)
//     and judged with the judge Part returns, retried as an arbitrated
//     request (sending a part again replaces it with the same bytes); its
//     tag ([Verdict.Tag]) is journaled once confirmed.
//   - Complete(upload, tags) ends the upload (tags[n-1] is part n's), and
//     [Step.Judge] judges its answer as the step's own; the uploads
//     Strays lists then are aborted.
//   - A deposit that ends otherwise (a terminal answer, the run stopped
//     by a refusal) sends Abort(upload) and forgets the upload, so that
//     nothing is left stored and billed; one interrupted (a crash, a
//     signal, a drain) keeps it for the next run to resume.
//
// Every request but Begin, Part, Complete and Held's is judged by
// JudgeOther, whose [Retry] and [Ambiguous] answers are sent again.
type Parts struct {
	// Count is how many parts the body is sent in, at least 1.
	Count int
	// Size is the body's length in bytes, and PartSize the length of
	// every part but the last (which is the rest). The engine journals an
	// upload under its part size, so a run with another one begins anew.
	Size, PartSize int64
	// Held looks for what the step makes; nil looks for nothing.
	Held *Check
	// Begin starts an upload; JudgeBegin names it ([Verdict.ID]).
	Begin      func() (Request, error)
	JudgeBegin func(Answer) Verdict
	// Part is part n of upload and the judge of its answer, whose Tag is
	// the part's tag on the server.
	Part func(upload string, n int) (Request, func(Answer) Verdict, error)
	// List is a page of the parts upload holds, after part number after.
	List func(upload string, after int) (Request, error)
	// ReadList reads a page: the parts it names, the part number the next
	// page starts after (0: none), gone for an upload the server no longer
	// has, and ok false for an answer that is no page (judged then by
	// JudgeOther).
	ReadList func(Answer) (held []HeldPart, next int, gone, ok bool)
	// Complete ends upload with its parts' tags; judged by [Step.Judge].
	Complete func(upload string, tags []string) (Request, error)
	// Abort ends upload without making anything.
	Abort func(upload string) (Request, error)
	// Strays, when set, lists the uploads the server holds open for what
	// the step makes: those of earlier attempts whose answer was lost, or
	// whose sender died before journaling them. The engine aborts each
	// one (but the upload journaled) before it begins an upload and once
	// the step is complete, so none is left billed. ReadStrays reads the
	// listing: the uploads' ids, ok false for an answer that is none.
	Strays     func() (Request, error)
	ReadStrays func(Answer) (uploads []string, ok bool)
	// JudgeOther judges the answers to List and Abort.
	JudgeOther func(Answer) Verdict
}

// HeldPart is a part an upload holds on the server: its number, its tag
// (an ETag) and its size.
type HeldPart struct {
	N    int
	Tag  string
	Size int64
}

// FileParter is a Driver that sends some dataset files in parts: the
// keyer hashes every file larger than FilePartSize in parts of that size
// in the read that keys it ([canonical.Keyed.Parts]), so the parts'
// checksums cost no second read.
type FileParter interface {
	FilePartSize() int64
}
