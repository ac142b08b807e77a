package gateway

import (
	"net/http"
	"slices"
	"strconv"
	"time"
)

// The Anthropic Models API (GET /v1/models, GET /v1/models/{id}), answered instead of
// OpenAI's list when the request carries an anthropic-version header, as Anthropic's
// SDKs send on every request (docs/reference.md §17): the models in Anthropic's shape,
// paged by limit (1..1000, default 20), after_id and before_id, errors in Anthropic's
// shape.

// anthropicModel is one model in the Anthropic Models API's shape.
type anthropicModel struct {
	Type        string `json:"type"` // "model"
	ID          string `json:"id"`
	DisplayName string `json:"display_name"` // the served name, as there is no other
	CreatedAt   string `json:"created_at"`   // RFC 3339, the time of the answer (as `created`)
}

// anthropicModelList is a page of models: first_id and last_id name its ends (null when
// empty), has_more says whether more lie beyond last_id (or, paging back with before_id,
// before first_id).
type anthropicModelList struct {
	Data    []anthropicModel `json:"data"`
	HasMore bool             `json:"has_more"`
	FirstID *string          `json:"first_id"`
	LastID  *string          `json:"last_id"`
}

// anthropicClient reports whether r comes from an Anthropic client.
func anthropicClient(r *http.Request) bool { return r.Header.Get("anthropic-version") != "" }

// Bounds of the Anthropic Models API's limit parameter.
const (
	anthropicModelsDefaultLimit = 20
	anthropicModelsMaxLimit     = 1000
)

func anthropicModelOf(id string, created time.Time) anthropicModel {
	return anthropicModel{Type: "model", ID: id, DisplayName: id, CreatedAt: created.UTC().Format(time.RFC3339)}
}

// anthropicModelsPage pages ids (in the order listed) by query's limit, after_id and
// before_id. Errors: a limit out of bounds or not a number, both ids given, an id not
// listed.
func anthropicModelsPage(ids []string, limitParam, after, before string, created time.Time) (anthropicModelList, *APIError) {
	limit := anthropicModelsDefaultLimit
	if limitParam != "" {
		n, err := strconv.Atoi(limitParam)
		if err != nil || n < 1 || n > anthropicModelsMaxLimit {
			return anthropicModelList{}, newError(KindInvalidValue, "limit", "Invalid 'limit': %q is not a number from 1 to %d.", clipName(limitParam), anthropicModelsMaxLimit)
		}
		limit = n
	}
	if after != "" && before != "" {
		return anthropicModelList{}, newError(KindInvalidValue, "after_id", "Give 'after_id' or 'before_id', not both.")
	}
	from, to := 0, len(ids)
	for _, p := range []struct{ name, id string }{{"after_id", after}, {"before_id", before}} {
		if p.id == "" {
			continue
		}
		i := slices.Index(ids, p.id)
		if i < 0 {
			return anthropicModelList{}, newError(KindInvalidValue, p.name, "Invalid '%s': no model %q is listed.", p.name, clipName(p.id))
		}
		if p.name == "after_id" {
			from = i + 1
		} else {
			to = i
		}
	}
	page := anthropicModelList{Data: []anthropicModel{}}
	if before != "" {
		from, page.HasMore = max(from, to-limit), to-limit > 0
	} else {
		to, page.HasMore = min(to, from+limit), from+limit < len(ids)
	}
	for _, id := range ids[from:to] {
		page.Data = append(page.Data, anthropicModelOf(id, created))
	}
	if n := len(page.Data); n > 0 {
		page.FirstID, page.LastID = &page.Data[0].ID, &page.Data[n-1].ID
	}
	return page, nil
}
