package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
)

// This file runs a step sent in parts (driver.Parts): its upload journaled
// in the store before the first part, each part's tag recorded once
// confirmed, the parts the server holds with the tags journaled never sent
// again, and an upload whose deposit ends otherwise than interrupted
// aborted.

// uploadStore is what a step sent in parts needs of a store, beside Store.
type uploadStore interface {
	LookupUpload(ctx context.Context, target, key string) (dedup.Upload, error)
	BeginUpload(ctx context.Context, target, key, id string) error
	RecordPart(ctx context.Context, target, key, id string, n int, tag string) error
	EndUpload(ctx context.Context, target, key, id string) error
}

// guardedUploads makes the upload calls of a guarded store through its
// guard, as every other store call is made.
type guardedUploads struct{ s *guarded }

func (g guardedUploads) us() uploadStore { return g.s.s.(uploadStore) }

func (g guardedUploads) LookupUpload(ctx context.Context, target, key string) (dedup.Upload, error) {
	return guardCall(g.s.g, ctx, "look up an upload", false, func(ctx context.Context) (dedup.Upload, error) {
		return g.us().LookupUpload(ctx, target, key)
	})
}

func (g guardedUploads) BeginUpload(ctx context.Context, target, key, id string) error {
	_, err := guardCall(g.s.g, ctx, "journal an upload", true, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, g.us().BeginUpload(ctx, target, key, id)
	})
	return err
}

func (g guardedUploads) RecordPart(ctx context.Context, target, key, id string, n int, tag string) error {
	_, err := guardCall(g.s.g, ctx, "record a part", true, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, g.us().RecordPart(ctx, target, key, id, n, tag)
	})
	return err
}

func (g guardedUploads) EndUpload(ctx context.Context, target, key, id string) error {
	_, err := guardCall(g.s.g, ctx, "end an upload", true, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, g.us().EndUpload(ctx, target, key, id)
	})
	return err
}

// maxUploadRounds bounds the uploads one run begins for a step: an upload
// the server no longer has is begun again once, after its Held look.
const maxUploadRounds = 2

// partsRun is the state of one step sent in parts.
type partsRun struct {
	r      *runDeposit
	s      *step
	p      *driver.Parts
	prior  []string
	target string // the journal's (target, key): the deposit's target and
	key    string // the deposit key with the step's label and part size
	held   int64  // bytes the server held already when the step began
}

// sendParts runs step s, sent in parts, and returns its identifier.
func (r *runDeposit) sendParts(ctx context.Context, s *step, prior []string) (string, error) {
	if r.c.uploads == nil {
		return "", fmt.Errorf("%w: the store keeps no uploads, which the target's step %s is sent in", ErrStopRun, s.Label)
	}
	g := &partsRun{r: r, s: s, p: s.Parts, prior: prior, target: r.primary.Target, key: r.key + " " + s.Label + " " + strconv.FormatInt(s.Parts.PartSize, 10)}
	return g.run(ctx)
}

func (g *partsRun) run(ctx context.Context) (string, error) {
	r, c, p := g.r, g.r.c, g.p
	began := false
	defer func() {
		if began {
			c.transfer(TransferEvent{Key: r.key, Label: g.s.Label, Size: p.Size, Done: true})
		}
	}()
	for round := 0; round < maxUploadRounds; round++ {
		up, err := c.uploads.LookupUpload(ctx, g.target, g.key)
		var tags map[int]string
		switch {
		case isNotFound(err):
			if id, done, err := g.lookHeld(ctx); done {
				return id, err
			}
			if err := g.abortStrays(ctx, ""); err != nil {
				return "", err
			}
			if up.ID, err = g.begin(ctx); err != nil {
				return "", err
			}
			tags = map[int]string{}
		case err != nil:
			return "", c.storeError(err)
		default:
			var gone bool
			if tags, gone, err = g.confirmed(ctx, up); err != nil {
				return "", err
			}
			if gone {
				if err := c.uploads.EndUpload(ctx, g.target, g.key, up.ID); err != nil {
					return "", c.storeError(err)
				}
				continue
			}
		}
		if !began {
			began = true
			c.transfer(TransferEvent{Key: r.key, Label: g.s.Label, Size: p.Size, Held: g.held, Begin: true})
		}
		all, gone, err := g.sendMissing(ctx, up.ID, tags)
		if err == nil && !gone {
			var id string
			id, gone, err = g.complete(ctx, up.ID, all)
			if err == nil && !gone {
				g.sweep(ctx)
				return id, nil
			}
		}
		if err != nil {
			return "", g.ended(ctx, up.ID, err)
		}
		// The server no longer has the upload: completed by an attempt
		// whose answer was lost, or aborted. Held looks before another.
		if err := c.uploads.EndUpload(ctx, g.target, g.key, up.ID); err != nil {
			return "", c.storeError(err)
		}
	}
	return "", fmt.Errorf("%w: the server lost the upload of %s twice in one run", ErrUnresolved, g.s.Label)
}

// lookHeld runs the Held look: done when it found what the step makes.
func (g *partsRun) lookHeld(ctx context.Context) (string, bool, error) {
	r := g.r
	if g.p.Held == nil {
		return "", false, nil
	}
	x := r.c.newExchange(r.key, r.drain)
	f, err := x.runCheck(ctx, g.p.Held, g.prior, false)
	r.res.Requests += x.requests
	r.res.Retries += x.retries
	switch {
	case err != nil:
		return "", true, err
	case f.Kind == driver.Present:
		g.sweep(ctx)
		id, err := r.confirm(ctx, g.s, OutcomeExisting, cmp.Or(f.ID, g.s.FallbackID(g.prior)), 0)
		return id, true, err
	case f.Kind == driver.Foreign:
		return "", true, r.fail(ctx, g.s, f.herr)
	}
	return "", false, nil
}

// abortStrays aborts the uploads the server holds open for what the step
// makes (driver.Parts.Strays), but keep.
func (g *partsRun) abortStrays(ctx context.Context, keep string) error {
	if g.p.Strays == nil {
		return nil
	}
	req, err := g.p.Strays()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var strays []string
	var ok bool
	a, v, err := g.send(ctx, req, func(a answer) verdict {
		if strays, ok = g.p.ReadStrays(a); ok {
			return verdict{Class: driver.Created}
		}
		return g.p.JudgeOther(a)
	})
	if err != nil {
		return err
	}
	if !ok {
		return strayError(req, a, v)
	}
	for _, id := range strays {
		if id == keep {
			continue
		}
		req, err := g.p.Abort(id)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		a, v, err := g.send(ctx, req, g.p.JudgeOther)
		if err != nil {
			return err
		}
		if v.Class != driver.Created && v.Class != driver.Exists {
			return strayError(req, a, v)
		}
	}
	return nil
}

// strayError is the error of an answer a (judged v) to a request about
// strays: never the deposit's failure, since nothing of the step itself
// was refused.
func strayError(req request, a answer, v verdict) error {
	herr := answerError(req.Method, a, v.Problem)
	if v.Class == driver.Stop {
		return fmt.Errorf("%w: %w", ErrStopRun, herr)
	}
	return fmt.Errorf("%w: %w", ErrUnresolved, herr)
}

// sweep aborts the strays of a step that is complete; what it cannot
// abort is logged, for the step's outcome stands.
func (g *partsRun) sweep(ctx context.Context) {
	if err := g.abortStrays(context.WithoutCancel(ctx), ""); err != nil {
		g.r.c.log.Warn("uploads left open by earlier attempts could not be aborted", "key", g.r.key, "step", g.s.Label, "error", err)
	}
}

// begin starts an upload and journals it before any part is sent.
func (g *partsRun) begin(ctx context.Context) (string, error) {
	r := g.r
	req, err := g.p.Begin()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	a, v, err := g.send(ctx, req, g.p.JudgeBegin)
	if err != nil {
		return "", err
	}
	if v.Class != driver.Created || v.ID == "" {
		return "", g.refused(ctx, req, a, v)
	}
	// Lost to a power cut, the journal would leave the upload unknown to
	// the next run, and billed.
	if err := r.c.uploads.BeginUpload(dedup.WithDurableCommit(ctx), g.target, g.key, v.ID); err != nil {
		return "", r.c.storeError(err)
	}
	return v.ID, nil
}

// confirmed lists the parts the server holds of upload and returns the
// tags of those it holds as journaled; gone when the server has no such
// upload. A part held with another tag than its journaled one is an
// error: the upload is aborted and the deposit fails.
func (g *partsRun) confirmed(ctx context.Context, up dedup.Upload) (map[int]string, bool, error) {
	held := map[int]driver.HeldPart{}
	after := 0
	for pages := 0; pages <= g.p.Count/100+1; pages++ {
		req, err := g.p.List(up.ID, after)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		var page []driver.HeldPart
		var next int
		var gone, ok bool
		a, v, err := g.send(ctx, req, func(a answer) verdict {
			if page, next, gone, ok = g.p.ReadList(a); ok {
				return verdict{Class: driver.Created}
			}
			return g.p.JudgeOther(a)
		})
		if err != nil {
			return nil, false, err
		}
		if !ok {
			return nil, false, g.ended(ctx, up.ID, g.refused(ctx, req, a, v))
		}
		if gone {
			return nil, true, nil
		}
		for _, h := range page {
			held[h.N] = h
		}
		if next == 0 {
			tags := map[int]string{}
			for n, tag := range up.Tags {
				h, ok := held[n]
				switch {
				case !ok || h.Size != g.partLen(n):
					// Not held, or not as this part: sent again.
				case h.Tag != tag:
					herr := answerError(req.Method, a, fmt.Sprintf("the server holds part %d of the upload with tag %s, not the %s this client sent: other bytes than the file's", n, h.Tag, tag))
					return nil, false, g.ended(ctx, up.ID, g.r.fail(ctx, g.s, herr))
				default:
					tags[n] = tag
					g.held += h.Size
				}
			}
			return tags, false, nil
		}
		after = next
	}
	return nil, false, fmt.Errorf("%w: the listing of the upload's parts did not end", ErrUnresolved)
}

// partLen is the length of part n.
func (g *partsRun) partLen(n int) int64 {
	return min(g.p.PartSize, g.p.Size-int64(n-1)*g.p.PartSize)
}

// sendMissing sends the parts of upload that tags lacks, in order, and
// returns every part's tag; gone when the server no longer has it.
func (g *partsRun) sendMissing(ctx context.Context, upload string, tags map[int]string) ([]string, bool, error) {
	r := g.r
	all := make([]string, g.p.Count)
	for n := 1; n <= g.p.Count; n++ {
		if tag, ok := tags[n]; ok {
			all[n-1] = tag
			continue
		}
		req, judge, err := g.p.Part(upload, n)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		a, v, err := g.send(ctx, r.c.counted(req, r.key, g.s.Label), judge)
		if err != nil {
			return nil, false, err
		}
		switch {
		case v.Class == driver.Conflict:
			return nil, true, nil
		case v.Class != driver.Created || v.Tag == "":
			return nil, false, g.refused(ctx, req, a, v)
		}
		if err := r.c.uploads.RecordPart(ctx, g.target, g.key, upload, n, v.Tag); err != nil {
			return nil, false, r.c.storeError(err)
		}
		all[n-1] = v.Tag
	}
	return all, false, nil
}

// complete ends upload with the parts' tags, judged as the step's own
// request; gone when the server no longer has the upload.
func (g *partsRun) complete(ctx context.Context, upload string, tags []string) (string, bool, error) {
	r, s := g.r, g.s
	req, err := g.p.Complete(upload, tags)
	if err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	a, v, err := g.send(ctx, req, s.Judge)
	if err != nil {
		return "", false, err
	}
	var id string
	switch v.Class {
	case driver.Created:
		id, err = r.confirm(ctx, s, OutcomeCreated, cmp.Or(v.ID, s.FallbackID(g.prior)), a.Status)
	case driver.Exists:
		id, err = r.confirm(ctx, s, exists(a.AfterAmbiguous), cmp.Or(v.ID, s.FallbackID(g.prior)), a.Status)
	case driver.Conflict:
		return "", true, nil
	default:
		return "", false, g.refused(ctx, req, a, v)
	}
	if err != nil {
		return "", false, err
	}
	if err := r.c.uploads.EndUpload(context.WithoutCancel(ctx), g.target, g.key, upload); err != nil {
		return "", false, r.c.storeError(err)
	}
	return id, false, nil
}

// send sends req as an arbitrated request (each of a step in parts is:
// a part sent again replaces itself, a completion is conditional) until
// judge settles an answer or retrying stops.
func (g *partsRun) send(ctx context.Context, req request, judge func(answer) verdict) (answer, verdict, error) {
	r := g.r
	req.Header = r.c.withUserHeader(req.Header)
	x := r.c.newExchange(r.key, r.drain)
	var v verdict
	a, cls, err := x.do(ctx, req, true, func(a answer) verdict { v = judge(a); return v })
	r.res.Requests += x.requests
	r.res.Retries += x.retries
	if err != nil {
		return a, v, err
	}
	if v.Warn != "" {
		r.c.warnOnce(v.Warn, "status", a.Status, "endpoint", driver.RedactURL(a.URL))
	}
	v.Class = cls
	if cls.Retryable() {
		return a, v, x.unresolved(answerError(req.Method, a, v.Problem))
	}
	return a, v, nil
}

// refused is the error of an answer a (judged v) that settles nothing of
// req: a terminal answer fails the step, a stop stops the run.
func (g *partsRun) refused(ctx context.Context, req request, a answer, v verdict) error {
	herr := answerError(req.Method, a, v.Problem)
	switch v.Class {
	case driver.Terminal:
		return g.r.fail(ctx, g.s, herr)
	case driver.Stop:
		return fmt.Errorf("%w: %w", ErrStopRun, herr)
	case driver.Canceled:
		return fmt.Errorf("%w: %w", ErrInterrupted, herr)
	}
	return fmt.Errorf("%w: %w", ErrUnresolved, herr)
}

// ended ends upload when err ends its deposit otherwise than interrupted
// or unresolved (a part refused for good, the run stopped): the upload is
// aborted, so that nothing is left stored on the server, and forgotten.
// A deposit interrupted or unresolved keeps it, for a later run to
// resume. It returns err.
func (g *partsRun) ended(ctx context.Context, upload string, err error) error {
	if !errors.Is(err, ErrTerminal) && !errors.Is(err, ErrStopRun) && !errors.Is(err, ErrInvalid) {
		return err
	}
	r := g.r
	ctx = context.WithoutCancel(ctx)
	req, aerr := g.p.Abort(upload)
	if aerr == nil {
		var a answer
		var v verdict
		if a, v, aerr = g.send(ctx, req, g.p.JudgeOther); aerr == nil && v.Class != driver.Created && v.Class != driver.Exists {
			aerr = answerError(req.Method, a, v.Problem)
		}
	}
	if aerr != nil {
		r.c.log.Warn("an upload in parts could not be aborted; the next run aborts it", "key", r.key, "step", g.s.Label, "error", aerr)
		return err
	}
	if eerr := r.c.uploads.EndUpload(ctx, g.target, g.key, upload); eerr != nil {
		r.c.log.Warn("an aborted upload stays journaled", "key", r.key, "step", g.s.Label, "error", eerr)
	}
	return err
}

// TransferEvent reports a dataset file's body as it is sent: Begin when
// its transfer starts (Size its length, Held the bytes the server held
// already from an earlier run), Sent bytes as they are read to be sent
// (a retry's bytes count again), Done when the transfer ends, whatever
// its outcome.
type TransferEvent struct {
	Key, Label       string
	Size, Held, Sent int64
	Begin, Done      bool
}

// transfer reports e to the OnTransfer hook.
func (c *Client) transfer(e TransferEvent) {
	if c.hooks.OnTransfer != nil {
		c.hooks.OnTransfer(e)
	}
}

// counted returns req whose streamed body reports the bytes read from it
// to the OnTransfer hook.
func (c *Client) counted(req request, key, label string) request {
	if c.hooks.OnTransfer == nil || req.Open == nil {
		return req
	}
	open := req.Open
	req.Open = func() (io.Reader, error) {
		body, err := open()
		if err != nil {
			return nil, err
		}
		return &countingReader{r: body, c: c, key: key, label: label}, nil
	}
	return req
}

// countingReader reports what is read from r; its length is r's, for a
// request's Content-Length.
type countingReader struct {
	r          io.Reader
	c          *Client
	key, label string
}

func (cr *countingReader) Read(p []byte) (int, error) {
	n, err := cr.r.Read(p)
	if n > 0 {
		cr.c.transfer(TransferEvent{Key: cr.key, Label: cr.label, Sent: int64(n)})
	}
	return n, err
}

// Len is the body's length, as the reader counted reports it.
func (cr *countingReader) Len() int {
	if l, ok := cr.r.(interface{ Len() int }); ok {
		return l.Len()
	}
	return -1
}

// Close closes the reader counted, a file.
func (cr *countingReader) Close() error {
	if cl, ok := cr.r.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}
