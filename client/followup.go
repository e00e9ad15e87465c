package client

// maxUnsettledLines bounds the unresolved lines a batch remembers for
// follow-ups: about 220 bytes each, so at most some 3.6 MB however long the
// batch (100,000 lines kept without a bound held 19 MB).
const maxUnsettledLines = 1 << 14

// unsettledLine is what a follow-up needs of a line reported unresolved: its
// key and number, and what its result added to the Summary.
type unsettledLine struct {
	key                         string
	line                        int64
	requests, retries, rechecks int
}

// unsettledLines remembers, by key, the lines of a batch whose results were
// delivered unresolved, so that a later result that settles the key can
// follow them up. It holds only lines unresolved now: a key's lines are
// forgotten once it settles, and the whole set when the batch ends. It holds
// at most max lines: a line reported unresolved while max are held is not
// remembered, and its unresolved result stays its final one (a re-run
// settles it), so memory stays flat however many items of a long batch end
// unresolved. Not safe for concurrent use: Run calls it under its report
// lock.
type unsettledLines struct {
	max   int
	n     int
	byKey map[string][]unsettledLine
}

func newUnsettledLines(max int) *unsettledLines {
	return &unsettledLines{max: max, byKey: map[string][]unsettledLine{}}
}

// add remembers r, an unresolved result with a key, unless max lines are
// held already.
func (u *unsettledLines) add(r ItemResult) {
	if u.n >= u.max {
		return
	}
	u.n++
	u.byKey[r.Key] = append(u.byKey[r.Key], unsettledLine{
		key: r.Key, line: r.Line,
		requests: r.Requests, retries: r.Retries, rechecks: r.Rechecks,
	})
}

// settle forgets the lines of key and returns them, in the order they were
// reported.
func (u *unsettledLines) settle(key string) []unsettledLine {
	lines, ok := u.byKey[key]
	if !ok {
		return nil
	}
	delete(u.byKey, key)
	u.n -= len(lines)
	return lines
}

// len is the number of lines held.
func (u *unsettledLines) len() int { return u.n }

// followUp is the result of the unresolved line l once a later result r of
// the batch settled its key: replayed with r's identifier, or failed with
// r's error. It counts the requests l sent, as l's first result did.
func (l unsettledLine) followUp(r ItemResult) ItemResult {
	f := ItemResult{Line: l.line, FollowUp: true, Result: Result{
		Key: l.key, Outcome: OutcomeReplayed,
		Identifier: r.Identifier, Status: r.Status, RecordID: r.RecordID,
		Requests: l.requests, Retries: l.retries, Rechecks: l.rechecks,
	}}
	if r.Err != nil {
		f.Outcome, f.Err = r.Outcome, r.Err
	}
	return f
}
