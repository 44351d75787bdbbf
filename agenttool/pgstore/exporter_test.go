package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// twoReplicas opens two stores on one new schema, closed when the test
// ends.
func twoReplicas(t *testing.T) (a, b *pgstore.Store) {
	a = pgtest.Open(t)
	b, err := pgstore.Open(context.Background(), &pgstore.Options{URL: pgtest.URL(t), Schema: a.Schema()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}

// TestExportPagesAcrossReplicasPastUnreadableRows pages through one
// schema from two stores in turn (two replicas), with two rows that cannot
// be read — one at the end of a page, one in the middle: every readable
// record is listed once, in order, and the unreadable ones are named and
// skipped.
func TestExportPagesAcrossReplicasPastUnreadableRows(t *testing.T) {
	ctx := context.Background()
	a, b := twoReplicas(t)
	var recs []storekit.Record
	var want []string
	for i := range 12 {
		k := fmt.Sprintf("send_email/%02d", i)
		recs = append(recs, storekit.Record{Key: k, Tool: "send_email", State: storekit.Unknown, Token: uint64(i + 1),
			Attempts: 1, Created: time.Unix(100, 0), Updated: time.Unix(101, 0)})
		if i != 3 && i != 7 {
			want = append(want, k)
		}
	}
	if err := a.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	corrupt := []string{"send_email/03", "send_email/07"} // the 4th row ends the first page of 4
	for _, k := range corrupt {
		if _, err := a.Pool().Exec(ctx, `UPDATE `+pgx.Identifier{a.Schema(), "records"}.Sanitize()+` SET principal = '\x01'::bytea WHERE key = $1`, k); err != nil {
			t.Fatal(err)
		}
	}
	var got, unreadable []string
	after := ""
	for page := 0; ; page++ {
		replica := []*pgstore.Store{a, b}[page%2]
		recs, next, err := replica.Export(ctx, after, 4)
		unreadable = append(unreadable, storekit.CorruptKeys(err)...)
		if err != nil && len(storekit.CorruptKeys(err)) == 0 {
			t.Fatal(err)
		}
		for _, r := range recs {
			got = append(got, r.Key)
		}
		if next == "" {
			break
		}
		after = next
	}
	if !slices.Equal(got, want) || !slices.Equal(unreadable, corrupt) {
		t.Errorf("exported %q, unreadable %q\nwant %q, unreadable %q", got, unreadable, want, corrupt)
	}
}

// An import while another replica claims never hands a token out twice: an
// import moves the token sequence past the tokens it brings, and a claim's
// nextval that lands between its read of the sequence and its move is
// never handed out again.
func TestAnImportWhileAnotherReplicaClaimsHandsNoTokenOutTwice(t *testing.T) {
	ctx := context.Background()
	a, b := twoReplicas(t)
	var mu sync.Mutex
	seen := map[uint64]string{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("send_email/claim-%d-%d", g, i)
				now := time.Now()
				res, err := a.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send_email", Principal: storekit.Digest{1}, Session: storekit.Digest{byte(g)},
					Fingerprint: storekit.Digest{2}, Owner: key, Now: now, Lease: time.Minute})
				if err != nil || !res.Claimed {
					t.Errorf("claim %s: %+v, %v", key, res, err)
					return
				}
				mu.Lock()
				if other, ok := seen[res.Record.Token]; ok {
					t.Errorf("token %d handed out to %s and to %s", res.Record.Token, other, key)
				}
				seen[res.Record.Token] = key
				mu.Unlock()
			}
		})
	}
	// Imports of records whose tokens are already behind the sequence:
	// nothing to move it past.
	for i := range 200 {
		rec := storekit.Record{Key: fmt.Sprintf("send_email/imported-%d", i), Tool: "send_email", State: storekit.Succeeded,
			Token: 1, Attempts: 1, Created: time.Unix(100, 0), Updated: time.Unix(101, 0), Expires: time.Now().Add(time.Hour)}
		if err := b.Import(ctx, []storekit.Record{rec}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d claims beside 200 imports", len(seen))
}

// Imports on two replicas at once raise the token sequence one at a time:
// each reads the sequence and then sets it, and a second import's set,
// made from an older read, would take it back below the first's tokens
// (a claim would then be handed an imported token). An import waits for
// the lock of another's raise.
func TestImportsRaiseTheTokenSequenceOneAtATime(t *testing.T) {
	ctx := context.Background()
	a, b := twoReplicas(t)
	conn, err := a.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// Another import's raise, in progress.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('retrysafe tokens ' || $1))`, a.Schema()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- b.Import(ctx, []storekit.Record{{Key: "send_email/imported", Tool: "send_email", State: storekit.Succeeded,
			Token: 1 << 40, Attempts: 1, Created: time.Unix(100, 0), Updated: time.Unix(101, 0), Expires: time.Now().Add(time.Hour)}})
	}()
	select {
	case err := <-done:
		t.Fatalf("an import raised the sequence while another's raise held it (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtext('retrysafe tokens ' || $1))`, a.Schema()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	key := "send_email/claimed"
	res, err := a.Claim(ctx, storekit.ClaimRequest{Key: key, Tool: "send_email", Principal: storekit.Digest{1}, Session: storekit.Digest{2},
		Fingerprint: storekit.Digest{3}, Owner: key, Now: time.Now(), Lease: time.Minute})
	if err != nil || !res.Claimed || res.Record.Token <= 1<<40 {
		t.Errorf("a claim after the import: %+v, %v; want a token above the imported %d", res, err, uint64(1)<<40)
	}
}
