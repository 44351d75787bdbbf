package memstore

import (
	"context"
	"slices"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

var _ storekit.Exporter = (*Store)(nil)

// Export implements storekit.Exporter, in the byte order of keys. The
// store keeps no order of its keys: each page looks at every key, which
// suits the store's purpose (tests and demos), not millions of records.
func (s *Store) Export(ctx context.Context, after string, limit int) ([]storekit.Record, string, error) {
	if err := s.lock(ctx); err != nil {
		return nil, "", err
	}
	defer s.mu.Unlock()
	if limit <= 0 {
		limit = storekit.DefaultExportLimit
	}
	// The limit smallest keys after after, in a max-heap: the page costs
	// the store's size, not its size times the page's logarithm.
	var page keyHeap
	for k := range s.index {
		switch {
		case k <= after:
		case len(page) < limit:
			page.push(k)
		case k < page[0]:
			page[0] = k
			page.down(0)
		}
	}
	slices.Sort(page)
	out := make([]storekit.Record, len(page))
	for i, k := range page {
		out[i] = s.entries[s.index[k]].record()
		out[i].Outcome = slices.Clone(out[i].Outcome)
	}
	next := ""
	if len(page) == limit {
		next = page[len(page)-1]
	}
	return out, next, nil
}

// keyHeap is a max-heap of keys.
type keyHeap []string

func (h *keyHeap) push(k string) {
	*h = append(*h, k)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if q[i] <= q[parent] {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

func (h keyHeap) down(i int) {
	for {
		most, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l] > h[most] {
			most = l
		}
		if r < len(h) && h[r] > h[most] {
			most = r
		}
		if most == i {
			return
		}
		h[i], h[most] = h[most], h[i]
		i = most
	}
}
