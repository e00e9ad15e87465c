package repotest

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

const ivReviewC1 = `{"type":"community-submission","receiver":{"community":"c-1"}}`

// submitted makes a valid draft with a review to c-1 and submits it: the
// draft's id and the request's.
func (v *ivSession) submitted() (string, string) {
	v.t.Helper()
	id := v.draft(ivMinimal, map[string]string{"a.txt": "hello"})
	v.want(http.StatusOK, http.MethodPut, "/records/"+id+"/draft/review", ivReviewC1)
	req := v.want(http.StatusAccepted, http.MethodPost, "/records/"+id+"/draft/actions/submit-review",
		`{"payload":{"content":"please","format":"html"}}`)
	return id, req["id"].(string)
}

func TestInvenioReviewIsSubmittedOnceThenAccepted(t *testing.T) {
	v := newIVSession(t, InvenioConfig{Communities: []string{"c-1"}})
	id := v.draft(ivMinimal, map[string]string{"a.txt": "hello"})
	review := "/records/" + id + "/draft/review"
	none := v.want(http.StatusNotFound, http.MethodGet, review, "")
	require.Equal(t, "Review for draft not found", none["message"])
	unknown := v.want(http.StatusNotFound, http.MethodPut, review, `{"type":"community-submission","receiver":{"community":"c-2"}}`)
	require.Equal(t, "Not found.", unknown["message"])
	badType := v.want(http.StatusBadRequest, http.MethodPut, review, `{"type":"other","receiver":{"community":"c-1"}}`)
	require.Equal(t, "type", badType["errors"].([]any)[0].(map[string]any)["field"])

	first := v.want(http.StatusOK, http.MethodPut, review, ivReviewC1)
	require.Equal(t, "created", first["status"])
	require.Equal(t, false, first["is_open"])
	require.Equal(t, map[string]any{"community": "c-1"}, first["receiver"])
	require.Equal(t, map[string]any{"record": id}, first["topic"])
	replaced := v.want(http.StatusOK, http.MethodPut, review, ivReviewC1)
	require.NotEqual(t, first["id"], replaced["id"])
	reqID := replaced["id"].(string)
	require.Equal(t, []InvenioRequest{{ID: reqID, Record: id, Community: "c-1", Status: "created"}}, v.s.Requests(),
		"a review not yet submitted is replaced")
	draft := v.want(http.StatusOK, http.MethodGet, "/records/"+id+"/draft", "")
	require.Equal(t, reqID, draft["parent"].(map[string]any)["review"].(map[string]any)["id"])
	blocked := v.want(http.StatusBadRequest, http.MethodPost, "/records/"+id+"/draft/actions/publish", "")
	require.Equal(t, "You cannot publish a draft with an open review request. Please cancel the review request first.", blocked["message"])

	sub := v.want(http.StatusAccepted, http.MethodPost, "/records/"+id+"/draft/actions/submit-review", "")
	require.Equal(t, "submitted", sub["status"])
	require.Equal(t, true, sub["is_open"])
	require.Equal(t, "t", sub["title"])
	again := v.want(http.StatusInternalServerError, http.MethodPost, "/records/"+id+"/draft/actions/submit-review", "")
	require.Equal(t, ivInternalError, again["message"], "a second submit is refused")
	reset := v.want(http.StatusBadRequest, http.MethodPut, review, ivReviewC1)
	require.Equal(t, "An open review cannot be deleted.", reset["message"])
	v.want(http.StatusBadRequest, http.MethodDelete, review, "")
	v.want(http.StatusBadRequest, http.MethodDelete, "/records/"+id+"/draft", "")
	require.Equal(t, "submitted", v.want(http.StatusOK, http.MethodGet, review, "")["status"])
	require.Equal(t, "submitted", v.record(id).Review)

	require.NoError(t, v.s.AcceptReview(reqID))
	require.ErrorIs(t, v.s.AcceptReview(reqID), ErrReview, "an accepted request is decided")
	rec := v.want(http.StatusOK, http.MethodGet, "/records/"+id, "")
	require.Equal(t, true, rec["is_published"])
	require.Equal(t, map[string]any{"ids": []any{"c-1"}, "default": "c-1"}, rec["parent"].(map[string]any)["communities"])
	require.NotContains(t, rec["parent"], "review")
	v.want(http.StatusNotFound, http.MethodGet, review, "")
	decided := v.want(http.StatusOK, http.MethodGet, "/requests/"+reqID, "")
	require.Equal(t, "accepted", decided["status"])
	require.Equal(t, true, decided["is_closed"])
	st := v.s.Stats()
	require.Equal(t, []int64{2, 1, 1}, []int64{st.Reviews, st.Submitted, st.Published})
	require.Equal(t, []string{"c-1"}, v.record(id).Communities)
}

func TestInvenioDeclinedReviewLeavesTheDraft(t *testing.T) {
	v := newIVSession(t, InvenioConfig{})
	id, reqID := v.submitted()
	require.NoError(t, v.s.DeclineReview(reqID))
	require.ErrorIs(t, v.s.DeclineReview("no-such-request"), ErrReview)
	review := v.want(http.StatusOK, http.MethodGet, "/records/"+id+"/draft/review", "")
	require.Equal(t, "declined", review["status"])
	require.Equal(t, true, review["is_closed"])
	v.want(http.StatusInternalServerError, http.MethodPost, "/records/"+id+"/draft/actions/submit-review", "")
	require.Equal(t, "declined", v.record(id).Review)
	require.False(t, v.record(id).Published)
	require.Empty(t, v.record(id).Communities)
}

func TestInvenioReviewRefusesWhatCannotBeSubmitted(t *testing.T) {
	v := newIVSession(t, InvenioConfig{})
	partial := v.draft(`{"metadata":{"title":"only"},"files":{"enabled":false}}`, nil)
	v.want(http.StatusOK, http.MethodPut, "/records/"+partial+"/draft/review", ivReviewC1)
	invalid := v.want(http.StatusBadRequest, http.MethodPost, "/records/"+partial+"/draft/actions/submit-review", "")
	require.Equal(t, "A validation error occurred.", invalid["message"])
	require.Equal(t, "created", v.record(partial).Review, "a refused submit changes nothing")

	v1 := v.published(ivVersioned, map[string]string{"a.txt": "hello"})
	v2 := v.want(http.StatusCreated, http.MethodPost, "/records/"+v1+"/versions", "")["id"].(string)
	refused := v.want(http.StatusBadRequest, http.MethodPut, "/records/"+v2+"/draft/review", ivReviewC1)
	require.Equal(t, "You cannot create a review for a new version of a published record.", refused["message"])
	missing := v.want(http.StatusNotFound, http.MethodPost, "/records/"+v2+"/draft/actions/submit-review", "")
	require.Equal(t, "Review for draft not found", missing["message"])

	anonymous := mustSend(t, v.c, http.MethodGet, v.s.API+"/records/"+partial+"/draft/review", "")
	require.Equal(t, http.StatusForbidden, anonymous.status)
}

func TestInvenioDroppedAnswersOfVersionsAndReviewsCommitted(t *testing.T) {
	v := newIVSession(t, InvenioConfig{Faults: "nth=1:drop"})
	v1 := v.published(ivVersioned, map[string]string{"a.txt": "hello"})
	require.True(t, v.record(v1).Published)

	require.Nil(t, v.do(http.MethodPost, "/records/"+v1+"/versions", ""), "the first new version's answer is dropped")
	recs := v.s.Records()
	v2 := recs[len(recs)-1].ID
	require.Equal(t, 2, v.record(v2).Version, "after the draft was opened")
	retry := v.want(http.StatusCreated, http.MethodPost, "/records/"+v1+"/versions", "")
	require.Equal(t, v2, retry["id"], "the retry gets the open draft")
	require.Equal(t, int64(1), v.s.Stats().Versions)

	require.Nil(t, v.do(http.MethodPost, "/records/"+v2+"/draft/actions/files-import", ""))
	require.Len(t, v.record(v2).Files, 1, "the import took effect")
	v.want(http.StatusBadRequest, http.MethodPost, "/records/"+v2+"/draft/actions/files-import", "")

	id := v.draft(ivMinimal, map[string]string{"b.txt": "bye"})
	require.Nil(t, v.do(http.MethodPut, "/records/"+id+"/draft/review", ivReviewC1))
	require.Equal(t, "created", v.record(id).Review)
	require.Nil(t, v.do(http.MethodPost, "/records/"+id+"/draft/actions/submit-review", ""))
	require.Equal(t, "submitted", v.record(id).Review, "the submit took effect")
	v.want(http.StatusInternalServerError, http.MethodPost, "/records/"+id+"/draft/actions/submit-review", "")
	require.Len(t, v.s.Requests(), 1)
	require.Positive(t, v.s.Stats().FaultsByKind["drop"])
}

func TestInvenioStatusFaultsOnVersionsAndReviewsCommitNothing(t *testing.T) {
	v := newIVSession(t, InvenioConfig{Faults: "nth=1:503"})
	v1 := v.published(ivVersioned, map[string]string{"a.txt": "hello"})

	a := v.do(http.MethodPost, "/records/"+v1+"/versions", "")
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Zero(t, v.s.Stats().Versions, "refused before anything committed")
	v2 := v.want(http.StatusCreated, http.MethodPost, "/records/"+v1+"/versions", "")["id"].(string)

	a = v.do(http.MethodPost, "/records/"+v2+"/draft/actions/files-import", "")
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Empty(t, v.record(v2).Files)

	id := v.draft(ivMinimal, map[string]string{"b.txt": "bye"})
	a = v.do(http.MethodPut, "/records/"+id+"/draft/review", ivReviewC1)
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Empty(t, v.s.Requests())
	v.want(http.StatusOK, http.MethodPut, "/records/"+id+"/draft/review", ivReviewC1)
	a = v.do(http.MethodPost, "/records/"+id+"/draft/actions/submit-review", "")
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Equal(t, "created", v.record(id).Review)
}

func TestInvenioReadFaultsReachVersionsAndReviews(t *testing.T) {
	v := newIVSession(t, InvenioConfig{Faults: "reads,nth=1:503"})
	id, reqID := v.submitted()
	for _, path := range []string{"/records/" + id + "/draft/review", "/requests/" + reqID, "/records/" + id + "/versions"} {
		a := v.do(http.MethodGet, path, "")
		require.Equal(t, http.StatusServiceUnavailable, a.status, path)
		v.want(http.StatusOK, http.MethodGet, path, "")
	}
	require.NoError(t, v.s.AcceptReview(reqID))
	a := v.do(http.MethodGet, "/records/"+id+"/versions/latest", "")
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Equal(t, id, v.want(http.StatusOK, http.MethodGet, "/records/"+id+"/versions/latest", "")["id"])
}
