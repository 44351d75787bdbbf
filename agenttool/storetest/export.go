package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// testExport checks that a store lists every record it holds, in every
// state, whole, once, in order of keys, a page at a time, and that a copy
// of it into a memory store (storekit.Copy) holds the same records. Keys
// here share a prefix and end in digits of one length, so that the bytes
// and any database collation order them alike.
func testExport(t *testing.T, s agenttool.Store) {
	ex, ok := s.(storekit.Exporter)
	if !ok {
		t.Skip("the store does not implement storekit.Exporter")
	}
	prefix := fmt.Sprintf("export%d/", keyCount.Add(1))
	var keys []string
	for i := range 11 {
		key := fmt.Sprintf("%s%04d", prefix, i)
		keys = append(keys, key)
		req := claimReq(key, t0)
		req.Session, req.Label = agenttool.Digest{byte(i)}, fmt.Sprintf("label %d", i)
		res := mustClaim(t, s, req)
		var err error
		switch i % 4 {
		case 0: // pending
		case 1:
			err = s.Finish(bg, finish(key, res.Record.Token, agenttool.Succeeded, t0.Add(time.Second)))
		case 2:
			err = s.Finish(bg, finish(key, res.Record.Token, agenttool.Failed, t0.Add(time.Second)))
		case 3:
			f := finish(key, res.Record.Token, agenttool.Unknown, t0.Add(time.Second))
			f.HeldUntil = t0.Add(time.Minute + 123456789*time.Nanosecond) // not a whole microsecond
			f.Resolution = &agenttool.Resolution{Verdict: "not applied", By: "operator:ana", Why: "bounced", At: t0.Add(time.Second)}
			f.RetryApproved = i == 7
			err = s.Finish(bg, f)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	const limit = 3
	var got []agenttool.Record
	after := ""
	for pages := 0; ; pages++ {
		if pages > len(keys) {
			t.Fatalf("more pages than records: paging does not move on (after %q)", after)
		}
		page, next, err := ex.Export(bg, after, limit)
		if err != nil {
			t.Fatalf("Export after %q: %v", after, err)
		}
		if len(page) > limit {
			t.Fatalf("a page of %d records, limit %d", len(page), limit)
		}
		got = append(got, page...)
		if len(page) == limit && (len(page) == 0 || next != page[len(page)-1].Key) {
			t.Errorf("a full page ending at %s says the next starts after %q", page[len(page)-1].Key, next)
		}
		if len(page) < limit && next != "" {
			t.Errorf("a short page (%d of %d) says another follows, after %q", len(page), limit, next)
		}
		if next == "" {
			break
		}
		after = next
	}
	var gotKeys []string
	for _, r := range got {
		gotKeys = append(gotKeys, r.Key)
	}
	if !slices.Equal(gotKeys, keys) {
		t.Fatalf("exported keys\n%q\nwant every key once, in order:\n%q", gotKeys, keys)
	}
	for _, r := range got {
		want, err := s.Get(bg, r.Key)
		if err != nil {
			t.Fatal(err)
		}
		if diff := storekit.Differences(r, want); len(diff) > 0 {
			t.Errorf("%s exported as\n%+v\nGet reads\n%+v\nthey differ in %v", r.Key, r, want, diff)
		}
	}

	if rest, next, err := ex.Export(bg, keys[len(keys)-1], limit); err != nil || len(rest) != 0 || next != "" {
		t.Errorf("Export after the last key: %d records, next %q, %v; want none", len(rest), next, err)
	}
	if all, next, err := ex.Export(bg, "", 0); err != nil || len(all) != len(keys) || next != "" {
		t.Errorf("Export with no limit: %d records, next %q, %v; want all %d at once (the default limit is %d)",
			len(all), next, err, len(keys), storekit.DefaultExportLimit)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, _, err := ex.Export(ctx, "", limit); !errors.Is(err, context.Canceled) {
		t.Errorf("Export with a cancelled context: %v", err)
	}

	// A copy holds the same records; the pending ones as the copy was told.
	mem := memstore.New()
	rep, err := storekit.Copy(bg, s, mem, &storekit.CopyOptions{Batch: 4, Pending: storekit.PendingAsUnknown, Now: func() time.Time { return t0 }})
	if err != nil || !rep.Complete() || rep.Copied != len(keys) || rep.AsUnknown != 3 {
		t.Fatalf("Copy: %+v, %v; want all %d copied, 3 of them pending copied as unknown", rep, err, len(keys))
	}
	for _, r := range got {
		c, err := mem.Get(bg, r.Key)
		if err != nil {
			t.Fatalf("%s was not copied: %v", r.Key, err)
		}
		if r.State == agenttool.Pending {
			if c.State != agenttool.Unknown || c.Attempts != r.Attempts+1 || c.Owner != "" || !c.LeaseExpiry.Equal(r.LeaseExpiry) || c.Token != r.Token {
				t.Errorf("pending %+v\ncopied as %+v; want unknown, its holder's attempt counted, its lease's end kept", r, c)
			}
			continue
		}
		if diff := storekit.Differences(r, c); len(diff) > 0 {
			t.Errorf("%s copied as\n%+v\nfrom\n%+v\nthey differ in %v", r.Key, c, r, diff)
		}
	}
}
