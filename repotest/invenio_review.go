package repotest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Community submission, as InvenioRDM runs it (docs-invenio-rdm
// docs/reference/rest_api_reviews.md; inveniosoftware/invenio-rdm-records
// services/review/service.py and requests/community_submission.py;
// inveniosoftware/invenio-requests customizations/actions.py): a draft's
// review is a request to a community, "created" by PUT .../draft/review,
// "submitted" by POST .../draft/actions/submit-review, then "accepted" or
// "declined" by a curator. Accepting publishes the draft into the
// community.

// ivSubmission is the type of a community-submission request.
const ivSubmission = "community-submission"

// The statuses of a review request.
const (
	reqCreated   = "created"
	reqSubmitted = "submitted"
	reqAccepted  = "accepted"
	reqDeclined  = "declined"
)

// ivInternalError is the message of a 500 that InvenioRDM maps from an
// exception no handler of its records blueprint knows (werkzeug's
// InternalServerError through flask-resources' handle_http_exception).
const ivInternalError = "The server encountered an internal error and was unable to complete your request. " +
	"Either the server is overloaded or there is an error in the application."

// ErrReview is wrapped by the errors of AcceptReview and DeclineReview: the
// request does not exist, or is not in a status the curator's action
// applies to.
var ErrReview = errors.New("repotest: review")

// InvenioRequest is one community-submission request the stub holds.
type InvenioRequest struct {
	ID        string
	Record    string // the draft under review (the request's topic)
	Community string // the receiver
	Status    string // "created", "submitted", "accepted" or "declined"
}

// ivRequest is a community-submission request. iv.mu guards it.
type ivRequest struct {
	id, number       string
	rec              *ivRecord // the topic
	community        string    // the receiver
	status           string
	title            string // the draft's title, set at submit
	created, updated time.Time
}

// open is InvenioRDM's is_open: submitted and not yet decided.
func (q *ivRequest) open() bool { return q.status == reqSubmitted }

// closed is InvenioRDM's is_closed: decided.
func (q *ivRequest) closed() bool { return q.status == reqAccepted || q.status == reqDeclined }

// answer is the request as the API answers it. iv.mu is held.
func (q *ivRequest) answer(r *http.Request) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": q.id, "number": q.number, "type": ivSubmission, "title": q.title, "status": q.status,
		"is_open": q.open(), "is_closed": q.closed(), "is_expired": false, "expires_at": nil,
		"created_by": map[string]any{"user": "1"},
		"receiver":   map[string]any{"community": q.community},
		"topic":      map[string]any{"record": q.rec.id},
		"created":    q.created.UTC().Format(time.RFC3339Nano),
		"updated":    q.updated.UTC().Format(time.RFC3339Nano),
		"links":      map[string]any{"self": absURL(r, "/api/requests/"+q.id)},
	})
	return b
}

// Requests returns every review request not deleted, in creation order.
func (iv *Invenio) Requests() []InvenioRequest {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	var out []InvenioRequest
	for _, q := range iv.reqOrder {
		if iv.requests[q.id] == q {
			out = append(out, InvenioRequest{ID: q.id, Record: q.rec.id, Community: q.community, Status: q.status})
		}
	}
	return out
}

// AcceptReview is a curator accepting the submitted request id: the draft
// joins the community (the parent's default when it had none) and is
// published, as InvenioRDM's accept action does. A draft that does not
// validate stays a draft and its request submitted, and the error says why.
func (iv *Invenio) AcceptReview(id string) error {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	q, err := iv.submittedRequest(id)
	if err != nil {
		return err
	}
	rec := q.rec
	if errs := publishErrors(rec); len(errs) > 0 {
		return fmt.Errorf("%w: draft %s does not validate: %s: %s", ErrReview, rec.id, errs[0].Field, strings.Join(errs[0].Messages, " "))
	}
	q.status, q.updated = reqAccepted, iv.now()
	rec.review = nil
	if p := rec.parent; !slices.Contains(p.communities, q.community) {
		p.communities = append(p.communities, q.community)
	}
	iv.commitPublish(rec)
	return nil
}

// DeclineReview is a curator declining the submitted request id: the draft
// stays a draft and keeps the declined request as its review.
func (iv *Invenio) DeclineReview(id string) error {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	q, err := iv.submittedRequest(id)
	if err != nil {
		return err
	}
	q.status, q.updated = reqDeclined, iv.now()
	iv.reindex(q.rec)
	return nil
}

// submittedRequest is the request id, which must be submitted. iv.mu is
// held.
func (iv *Invenio) submittedRequest(id string) (*ivRequest, error) {
	q := iv.requests[id]
	switch {
	case q == nil:
		return nil, fmt.Errorf("%w: no request %q", ErrReview, id)
	case q.status != reqSubmitted:
		return nil, fmt.Errorf("%w: request %s is %s: only a submitted request can be decided", ErrReview, id, q.status)
	}
	return q, nil
}

// serveReview answers /api/records/{id}/draft/review.
func (iv *Invenio) serveReview(w http.ResponseWriter, r *http.Request, id string) {
	switch r.Method {
	case http.MethodGet:
		iv.readReview(w, r, id)
	case http.MethodPut:
		iv.putReview(w, r, id)
	case http.MethodDelete:
		iv.deleteReview(w, r, id)
	default:
		ivError(w, http.StatusMethodNotAllowed, "The method is not allowed for the requested URL.")
	}
}

// putReview serves PUT /api/records/{id}/draft/review: 200 with a new
// request in status "created", replacing a review not yet submitted. A
// submitted review is refused (400 "An open review cannot be deleted."),
// and so is the draft of a new version (its parent's communities carry
// over).
func (iv *Invenio) putReview(w http.ResponseWriter, r *http.Request, id string) {
	_, body, ok := readIVJSON(w, r)
	if !ok {
		return
	}
	doc, isObject := body.(map[string]any)
	if !isObject {
		ivError(w, http.StatusBadRequest, "Invalid JSON: the body must be an object.")
		return
	}
	typ, _ := doc["type"].(string)
	receiver, _ := doc["receiver"].(map[string]any)
	community, _ := receiver["community"].(string)
	ft, ok := iv.admitWrite(w, "review", id)
	if !ok {
		return
	}
	iv.mu.Lock()
	out, status, msg, errs := iv.setReview(r, id, typ, community)
	iv.mu.Unlock()
	switch {
	case status != 0:
		ivError(w, status, msg)
	case len(errs) > 0:
		ivValidation(w, errs)
	default:
		iv.finish(w, r, ft, http.StatusOK, out)
	}
}

// setReview checks and sets the review of draft id: the answer, or the
// status and message of a refusal, or validation errors. iv.mu is held.
func (iv *Invenio) setReview(r *http.Request, id, typ, community string) ([]byte, int, string, []ivFieldError) {
	rec := iv.draft(id)
	switch {
	case rec == nil:
		return nil, http.StatusNotFound, "Draft not found.", nil
	case rec.review != nil && rec.review.open():
		return nil, http.StatusBadRequest, "An open review cannot be deleted.", nil
	case rec.index > 1:
		return nil, http.StatusBadRequest, "You cannot create a review for a new version of a published record.", nil
	case typ != ivSubmission:
		return nil, 0, "", []ivFieldError{{Field: "type", Messages: []string{"Invalid review type."}}}
	case community == "":
		return nil, 0, "", []ivFieldError{{Field: "receiver", Messages: []string{"Missing data for required field."}}}
	case len(iv.cfg.Communities) > 0 && !slices.Contains(iv.cfg.Communities, community):
		return nil, http.StatusNotFound, "Not found.", nil
	}
	iv.dropReview(rec)
	now := iv.now()
	q := &ivRequest{id: iv.newRequestID(), rec: rec, community: community, status: reqCreated, created: now, updated: now}
	q.number = strconv.Itoa(len(iv.reqOrder) + 1)
	iv.requests[q.id] = q
	iv.reqOrder = append(iv.reqOrder, q)
	rec.review = q
	rec.updated = now
	iv.stats.Reviews++
	iv.reindex(rec)
	return q.answer(r), 0, "", nil
}

// dropReview unsets rec's review; a request never submitted is deleted
// with it, a decided one is kept. iv.mu is held.
func (iv *Invenio) dropReview(rec *ivRecord) {
	if q := rec.review; q != nil && q.status == reqCreated {
		delete(iv.requests, q.id)
	}
	rec.review = nil
}

// newRequestID draws a request id shaped like a UUID. iv.mu is held.
func (iv *Invenio) newRequestID() string {
	iv.rseq++
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(iv.cfg.Seed))
	binary.BigEndian.PutUint64(b[8:], iv.rseq)
	sum := sha256.Sum256(append(b[:], "request"...))
	h := fmt.Sprintf("%x", sum[:16])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// readReview serves GET /api/records/{id}/draft/review.
func (iv *Invenio) readReview(w http.ResponseWriter, r *http.Request, id string) {
	ft, answered := iv.fault(w, "read", r.URL.Path, false)
	if answered {
		return
	}
	iv.mu.Lock()
	rec := iv.draft(id)
	var out []byte
	if rec != nil && rec.review != nil {
		out = rec.review.answer(r)
	}
	iv.mu.Unlock()
	switch {
	case rec == nil:
		ivError(w, http.StatusNotFound, "Draft not found.")
	case out == nil:
		ivError(w, http.StatusNotFound, "Review for draft not found")
	default:
		iv.finish(w, r, ft, http.StatusOK, out)
	}
}

// deleteReview serves DELETE /api/records/{id}/draft/review: 204, or 400
// for a submitted review.
func (iv *Invenio) deleteReview(w http.ResponseWriter, r *http.Request, id string) {
	ft, answered := iv.fault(w, "review-delete", id, false)
	if answered {
		return
	}
	iv.mu.Lock()
	rec := iv.draft(id)
	status, msg := 0, ""
	switch {
	case rec == nil:
		status, msg = http.StatusNotFound, "Draft not found."
	case rec.review == nil:
		status, msg = http.StatusNotFound, "Review for draft not found"
	case rec.review.open():
		status, msg = http.StatusBadRequest, "An open review cannot be deleted."
	default:
		iv.dropReview(rec)
		iv.reindex(rec)
	}
	iv.mu.Unlock()
	if status != 0 {
		ivError(w, status, msg)
		return
	}
	iv.finish(w, r, ft, http.StatusNoContent, nil)
}

// submitReview serves POST /api/records/{id}/draft/actions/submit-review:
// 202 with the request, now "submitted". The draft must validate as for a
// publish. Only a "created" request can be submitted; any other answers
// 500, since the action's refusal (CannotExecuteActionError) has no
// handler in InvenioRDM's records blueprint.
func (iv *Invenio) submitReview(w http.ResponseWriter, r *http.Request, id string) {
	if r.ContentLength != 0 {
		if _, _, ok := readIVJSON(w, r); !ok {
			return
		}
	}
	ft, ok := iv.admitWrite(w, "submit-review", id)
	if !ok {
		return
	}
	iv.mu.Lock()
	rec := iv.draft(id)
	status, msg := 0, ""
	var errs []ivFieldError
	var out []byte
	switch {
	case rec == nil:
		status, msg = http.StatusNotFound, "Draft not found."
	case rec.review == nil:
		status, msg = http.StatusNotFound, "Review for draft not found"
	case rec.review.status != reqCreated:
		status, msg = http.StatusInternalServerError, ivInternalError
	default:
		if errs = publishErrors(rec); len(errs) == 0 {
			q := rec.review
			md, _ := rec.body["metadata"].(map[string]any)
			q.title, _ = md["title"].(string)
			q.status, q.updated = reqSubmitted, iv.now()
			iv.stats.Submitted++
			iv.reindex(rec)
			out = q.answer(r)
		}
	}
	iv.mu.Unlock()
	switch {
	case status != 0:
		ivError(w, status, msg)
	case len(errs) > 0:
		ivValidation(w, errs)
	default:
		iv.finish(w, r, ft, http.StatusAccepted, out)
	}
}

// readRequest serves GET /api/requests/{id}: a review request, whatever
// became of its draft (invenio-requests resources/requests/config.py).
func (iv *Invenio) readRequest(w http.ResponseWriter, r *http.Request, id string) {
	ft, answered := iv.fault(w, "read", r.URL.Path, false)
	if answered {
		return
	}
	iv.mu.Lock()
	var out []byte
	if q := iv.requests[id]; q != nil {
		out = q.answer(r)
	}
	iv.mu.Unlock()
	if out == nil {
		ivError(w, http.StatusNotFound, "Not found.")
		return
	}
	iv.finish(w, r, ft, http.StatusOK, out)
}

// Requests returns every review request the stub holds, not deleted, in
// creation order.
func (s *InvenioServer) Requests() []InvenioRequest { return s.iv.Requests() }

// AcceptReview accepts the submitted request id, as a curator would: see
// Invenio.AcceptReview.
func (s *InvenioServer) AcceptReview(id string) error { return s.iv.AcceptReview(id) }

// DeclineReview declines the submitted request id, as a curator would.
func (s *InvenioServer) DeclineReview(id string) error { return s.iv.DeclineReview(id) }
