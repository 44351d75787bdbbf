package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/retrysafe/retrysafe/agenttool"
)

// access is what one request's viewer may see: every principal through the
// console's operator, or each of their principals through an operator
// limited to it (agenttool.Operator.ForPrincipal), which neither lists nor
// shows nor settles another principal's records.
type access struct {
	viewer Viewer
	views  []view
}

// view is one operator the viewer sees through.
type view struct {
	principal string // "" for a viewer of all principals
	op        *agenttool.Operator
}

// who asks the application who is viewing. It answers false, having
// answered the request, when the viewer may not use the console.
func (h *Handler) who(w http.ResponseWriter, r *http.Request) (*access, bool) {
	v, err := h.opts.Who(r)
	if err != nil {
		h.opts.Logger.Warn("retrysafe console: request refused by Who", "method", r.Method, "path", r.URL.Path, "err", err)
		plain(w, http.StatusForbidden, "you may not use this console")
		return nil, false
	}
	if v.Name == "" {
		h.opts.Logger.Error("retrysafe console: Who named no viewer", "method", r.Method, "path", r.URL.Path)
		plain(w, http.StatusInternalServerError, "the application did not say who is viewing")
		return nil, false
	}
	a := &access{viewer: v}
	if v.All {
		a.views = []view{{op: h.opts.Operator}}
		return a, true
	}
	for _, p := range v.Principals {
		if p == "" || slices.ContainsFunc(a.views, func(x view) bool { return x.principal == p }) {
			continue
		}
		a.views = append(a.views, view{principal: p, op: h.opts.Operator.ForPrincipal(p)})
	}
	return a, true
}

// errHidden is the answer for a reference the viewer may not see, and for
// one that does not exist: the two are not told apart.
var errHidden = errors.New("no action with this reference is visible to you")

// find returns the record of ref and the view it is visible through.
func (a *access) find(ctx context.Context, ref string) (agenttool.Record, view, error) {
	if ref == "" {
		return agenttool.Record{}, view{}, errHidden
	}
	for _, v := range a.views {
		rec, err := v.op.Show(ctx, ref)
		switch {
		case err == nil:
			return rec, v, nil
		case !errors.Is(err, agenttool.ErrNotFound):
			return agenttool.Record{}, view{}, fmt.Errorf("reading %s: %w", ref, err)
		}
	}
	return agenttool.Record{}, view{}, errHidden
}

// seen is one record listed, with the view it was listed through.
type seen struct {
	rec  agenttool.Record
	view view
}

// awaiting lists the records awaiting a decision that the viewer may see,
// up to limit per view. full reports a view that had more; unreadable
// names records the store could not read.
func (a *access) awaiting(ctx context.Context, limit int) (recs []seen, full bool, unreadable []string, err error) {
	for _, v := range a.views {
		got, err := v.op.Unknown(ctx, "", limit)
		if bad := agenttool.CorruptKeys(err); len(bad) > 0 {
			unreadable = append(unreadable, bad...)
		} else if err != nil {
			return nil, false, nil, err
		}
		full = full || len(got) >= limit
		for _, rec := range got {
			recs = append(recs, seen{rec: rec, view: v})
		}
	}
	return recs, full, unreadable, nil
}
