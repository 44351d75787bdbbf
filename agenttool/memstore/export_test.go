package memstore_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// TestExportPagesInByteOrder pages through keys of every kind of byte
// (upper and lower case, punctuation, multi-byte runes) while records are
// added behind and ahead of the page: every key is listed once, in byte
// order, with the one added ahead of the page, not the one behind it.
func TestExportPagesInByteOrder(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("aZ/_-.09é漢")
	keys := map[string]bool{}
	var recs []storekit.Record
	for len(recs) < 300 {
		var b []rune
		for range 1 + rng.IntN(6) {
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
		k := "tool/" + string(b)
		if keys[k] {
			continue
		}
		keys[k] = true
		recs = append(recs, storekit.Record{Key: k, Tool: "tool", State: storekit.Unknown, Token: uint64(len(recs) + 1),
			Created: time.Unix(0, 0), Updated: time.Unix(0, 0)})
	}
	if err := s.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	want := make([]string, 0, len(keys))
	for k := range keys {
		want = append(want, k)
	}
	slices.Sort(want)

	var got []string
	after := ""
	for page := 0; ; page++ {
		recs, next, err := s.Export(ctx, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			got = append(got, r.Key)
		}
		if page == 3 {
			added := []storekit.Record{
				{Key: "tool/+behind", Tool: "tool", State: storekit.Unknown, Token: 1000},
				{Key: "tool/~ahead", Tool: "tool", State: storekit.Unknown, Token: 1001},
			}
			if err := s.Import(ctx, added); err != nil {
				t.Fatal(err)
			}
			want = append(want, "tool/~ahead")
			slices.Sort(want)
		}
		if next == "" {
			break
		}
		after = next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("exported %d keys, want %d in byte order\n got %q\nwant %q", len(got), len(want), got, want)
	}
}
