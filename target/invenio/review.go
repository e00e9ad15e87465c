package invenio

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/depositkit/deposit/driver"
)

// Community submission (docs-invenio-rdm docs/reference/rest_api_reviews.md;
// invenio-requests customizations/actions.py): the draft's review request
// is set (PUT .../draft/review), then submitted (POST
// .../draft/actions/submit-review). A submitted request refuses a second
// submit, and a curator accepts it (publishing the record into the
// community) or declines it, maybe days later: the deposit is done once
// the request is submitted, and what the curator decides is not this
// client's to act on.

// reviewStep sets the draft's review request to community. A repeat while
// the request is only created replaces it with another, so an earlier
// attempt is looked for (GET .../draft/review) before it is sent again.
// Its identifier is the request id.
func (d invenioDriver) reviewStep(key, community string, draftAt int) driver.Step {
	body, _ := json.Marshal(map[string]any{"receiver": map[string]string{"community": community}, "type": "community-submission"})
	return driver.Step{
		Label: "review", Target: d.reviewTarget(), Key: key, Durable: true,
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPut, URL: d.url("records/"+url.PathEscape(prior[draftAt])+"/draft/review", nil), Header: jsonHeader(), Body: body, Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioFileVerdict(a)
			switch {
			case v.Class == driver.Created:
				if v.ID = stringMember(a.Body, "id"); v.ID == "" {
					v.Class, v.Problem = driver.Ambiguous, "the review answer names no request id"
				}
			case a.Err == nil && a.Status == http.StatusBadRequest && invenioProblem(a.Body) == "An open review cannot be deleted.":
				v.Class = driver.Conflict // submitted already: the review says to whom
			case a.Err == nil && a.Status == http.StatusNotFound:
				v.Problem = fmt.Sprintf("community %s or the draft not found: %s", community, invenioProblem(a.Body))
			}
			return v
		},
		Check: &driver.Check{
			Build: func(prior []string) (driver.Request, error) {
				return driver.Request{Method: http.MethodGet, URL: d.url("records/"+url.PathEscape(prior[draftAt])+"/draft/review", nil), Header: acceptJSON(), Full: true}, nil
			},
			Judge: func(a driver.Answer) driver.Finding {
				if a.Err == nil && a.Status == http.StatusNotFound {
					return driver.Finding{Kind: driver.Absent}
				}
				if a.Err != nil || a.Status != http.StatusOK {
					return driver.Finding{Kind: driver.Unknown, Class: invenioVerdict(a).Class, Problem: invenioProblem(a.Body)}
				}
				q := readRequest(a.Body)
				if q.Receiver.Community != community {
					return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf("the draft's review request %s goes to community %s, not %s", q.ID, q.Receiver.Community, community)}
				}
				return driver.Finding{Kind: driver.Present, ID: q.ID}
			},
		},
	}
}

// submitStep submits the review request, the deposit's primary step: done
// once the request is submitted, which InvenioRDM may answer 202. A second
// submit is refused with a 500 (the action's refusal has no handler in
// the records blueprint), so every ambiguous answer is settled by reading
// the request (GET /api/requests/{id}), never by sending again. Its
// identifier is the record id of the draft under review.
func (d invenioDriver) submitStep(key string, draftAt, reviewAt int) driver.Step {
	return driver.Step{
		Label: "submit review", Target: d.publishTarget(), Key: key, Primary: true, Durable: true, Accepts: true,
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, URL: d.url("records/"+url.PathEscape(prior[draftAt])+"/draft/actions/submit-review", nil), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioVerdict(a)
			switch {
			case v.Class == driver.Created:
				v.Class = driver.Accepted // settled by the request's status
			case a.Err == nil && a.Status == http.StatusNotFound:
				v.Class = driver.Conflict // no draft: accepted (published) already, or deleted
			}
			return v
		},
		Check: &driver.Check{
			Build: func(prior []string) (driver.Request, error) {
				return driver.Request{Method: http.MethodGet, URL: d.url("requests/"+url.PathEscape(prior[reviewAt]), nil), Header: acceptJSON(), Full: true}, nil
			},
			Judge: judgeSubmitted,
		},
	}
}

// judgeSubmitted reads a review request: submitted, and later accepted or
// declined, is the submit's effect; created is not yet submitted.
func judgeSubmitted(a driver.Answer) driver.Finding {
	if a.Err == nil && a.Status == http.StatusNotFound {
		return driver.Finding{Kind: driver.Absent}
	}
	if a.Err != nil || a.Status != http.StatusOK {
		return driver.Finding{Kind: driver.Unknown, Class: invenioVerdict(a).Class, Problem: invenioProblem(a.Body)}
	}
	q := readRequest(a.Body)
	switch q.Status {
	case "submitted", "accepted", "declined":
		return driver.Finding{Kind: driver.Present, ID: q.Topic.Record}
	case "created":
		return driver.Finding{Kind: driver.Absent}
	}
	return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf("the review request %s is %q: cancelled or expired on the server", q.ID, q.Status)}
}

// invenioRequest is the part of a review request the client reads.
type invenioRequest struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Receiver struct {
		Community string `json:"community"`
	} `json:"receiver"`
	Topic struct {
		Record string `json:"record"`
	} `json:"topic"`
}

func readRequest(body []byte) invenioRequest {
	var q invenioRequest
	_ = json.Unmarshal(body, &q)
	return q
}
