package opcmd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// stores is what OpenStore opens in these tests: stores by location, and
// which of them were closed.
type stores struct {
	byName map[string]agenttool.Store
	opened []opcmd.StoreSpec
	closed []string
}

func (s *stores) open(_ context.Context, spec opcmd.StoreSpec) (agenttool.Store, func() error, error) {
	st, ok := s.byName[spec.Location]
	if !ok {
		return nil, nil, errors.New("no store at " + spec.Location)
	}
	s.opened = append(s.opened, spec)
	return st, func() error { s.closed = append(s.closed, spec.Location); return nil }, nil
}

// copyRun runs a command with OpenStore opening s's stores.
func (f *fixture) copyRun(s *stores, args ...string) result {
	return f.runWith(context.Background(), &opcmd.Options{Name: "retrysafe", Now: f.now, Standalone: true, OpenStore: s.open}, args...)
}

// The copy an operator makes to move an application to another store:
// pending records are refused with what to do, then copied as unknown when
// asked; a second run copies nothing; every record arrives whole; both
// stores are closed.
func TestCopyCommand(t *testing.T) {
	f := newFixture(t, memstore.New())
	sent := f.sendEmail("tenant-1/ana", "Ana Lima", "ana@example.com")
	lost := f.lostEmail("tenant-1/bo", "Bo", "bo@example.com", "after")
	refund := f.refundOrder("tenant-1/ana", "", "order-7")
	// A call held this key when the application was stopped.
	held, err := f.store.Claim(context.Background(), storekit.ClaimRequest{Key: "send_email/held", Tool: "send_email",
		Principal: agenttool.Digest{1}, Fingerprint: agenttool.Digest{2}, Owner: "o", Now: time.Now(), Lease: time.Hour})
	if err != nil || !held.Claimed {
		t.Fatal(held, err)
	}
	target := memstore.New()
	s := &stores{byName: map[string]agenttool.Store{"app.db": f.store, "postgres://db/app": target}}

	out := f.copyRun(s, "copy", "-from", "app.db", "-to", "postgres://db/app", "-to-schema", "agents").exits(t, opcmd.ExitFailed,
		"not copied: send_email/held: pending: held by a call", "1 records were not copied", "stop the application", "-pending unknown")
	if row := out.row(t, "4"); strings.Join(row, " ") != "4 3 0 0 0 0 1 0 0" {
		t.Errorf("report %q:\n%s", row, out.stdout)
	}
	if len(s.opened) != 2 || s.opened[0] != (opcmd.StoreSpec{Location: "app.db"}) ||
		s.opened[1] != (opcmd.StoreSpec{Location: "postgres://db/app", Schema: "agents", Write: true}) || len(s.closed) != 2 {
		t.Errorf("opened %+v, closed %q; want the source to read, the target to write, both closed", s.opened, s.closed)
	}

	out = f.copyRun(s, "copy", "-from", "app.db", "-to", "postgres://db/app", "-pending", "unknown").ok(t)
	if row := out.row(t, "4"); strings.Join(row, " ") != "4 1 1 0 3 0 0 0 0" {
		t.Errorf("report %q:\n%s", row, out.stdout)
	}
	objs := f.copyRun(s, "-json", "copy", "-from", "app.db", "-to", "postgres://db/app", "-pending", "unknown").ok(t).lines(t)
	if len(objs) != 1 || objs[0]["copied"] != 0.0 || objs[0]["identical"] != 4.0 || objs[0]["read"] != 4.0 {
		t.Errorf("a second copy, -json: %v; want nothing copied, every record found there", objs)
	}
	for _, ref := range []string{sent.RequestRef, lost.RequestRef, refund.RequestRef} {
		from, _ := f.store.Get(context.Background(), ref)
		to, err := target.Get(context.Background(), ref)
		if d := storekit.Differences(from, to); err != nil || len(d) > 0 {
			t.Errorf("%s copied with differences %v, %v", ref, d, err)
		}
	}
	if rec, _ := target.Get(context.Background(), "send_email/held"); rec.State != agenttool.Unknown {
		t.Errorf("the held record copied as %v, want unknown", rec.State)
	}
}

// A record the target holds with other content is left as it is and
// reported, by reference, in -json too.
func TestCopyCommandReportsDifferences(t *testing.T) {
	f := newFixture(t, memstore.New())
	sent := f.sendEmail("tenant-1/ana", "", "ana@example.com")
	target := memstore.New()
	rec, _ := f.store.Get(context.Background(), sent.RequestRef)
	rec.Attempts = 3
	if err := target.Import(context.Background(), []agenttool.Record{rec}); err != nil {
		t.Fatal(err)
	}
	s := &stores{byName: map[string]agenttool.Store{"a": f.store, "b": target}}
	res := f.copyRun(s, "-json", "copy", "-from", "a", "-to", "b").exits(t, opcmd.ExitFailed, "1 already in the target with other content")
	objs := res.lines(t)
	if len(objs) != 2 || objs[0]["ref"] != sent.RequestRef || objs[0]["problem"] != "differs" ||
		!strings.Contains(objs[0]["detail"].(string), "Attempts") || objs[1]["differ"] != 1.0 {
		t.Errorf("-json output %v", objs)
	}
	if got, _ := target.Get(context.Background(), sent.RequestRef); got.Attempts != 3 {
		t.Errorf("the target's record was overwritten: %+v", got)
	}
}

func TestCopyCommandUsage(t *testing.T) {
	f := newFixture(t, memstore.New())
	s := &stores{byName: map[string]agenttool.Store{"a": f.store, "b": memstore.New()}}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"copy", "-from", "a"}, "-from and -to are required"},
		{[]string{"copy", "-from", "a", "-to", "a"}, "name the same store"},
		{[]string{"copy", "-from", "a", "-to", "b", "-pending", "skip"}, `-pending is refuse or unknown, not "skip"`},
		{[]string{"copy", "-from", "a", "-to", "b", "-batch", "0"}, "-batch must be at least 1"},
		{[]string{"copy", "-from", "a", "-to", "b", "extra"}, `unexpected argument "extra"`},
	} {
		f.copyRun(s, tc.args...).exits(t, opcmd.ExitUsage, tc.says)
	}
	f.copyRun(s, "copy", "-from", "nowhere", "-to", "b").exits(t, opcmd.ExitFailed, "opening the source nowhere: no store at nowhere")
	// An application's own mount has no OpenStore: copy says where to run it.
	f.run("copy", "-from", "a", "-to", "b").exits(t, opcmd.ExitUsage, "run it from cmd/retrysafe")
	if help := f.run("copy", "-h").ok(t).stdout; !strings.Contains(help, "copy -from STORE -to STORE [-batch N]") {
		t.Errorf("copy -h:\n%s", help)
	}
}

// A copy into a target whose record holds the slot a copied unknown action
// held: the action is copied beside the slot, said so, and counted.
func TestCopyCommandMovesASecondHolderBesideItsSlot(t *testing.T) {
	f := newFixture(t, memstore.New())
	unknown := func(key string) storekit.Record {
		return storekit.Record{Key: key, Tool: "send_email", State: storekit.Unknown, Principal: storekit.Digest{1}, Session: storekit.Digest{2},
			FenceScope: storekit.Digest{2}, Fingerprint: storekit.Digest{3}, Token: 4, Attempts: 1, Created: f.now(), Updated: f.now()}
	}
	source, target := memstore.New(), memstore.New()
	if err := source.Import(context.Background(), []storekit.Record{unknown("send_email/from-the-file")}); err != nil {
		t.Fatal(err)
	}
	if err := target.Import(context.Background(), []storekit.Record{unknown("send_email/in-the-database")}); err != nil {
		t.Fatal(err)
	}
	s := &stores{byName: map[string]agenttool.Store{"app.db": source, "postgres://db/app": target}}
	out := f.copyRun(s, "copy", "-from", "app.db", "-to", "postgres://db/app").ok(t)
	if !strings.Contains(out.stderr, "copied: send_email/from-the-file: moved beside its slot: it held the fence's slot of send_email in its scope, which send_email/in-the-database holds in the target") {
		t.Errorf("stderr does not say the record moved beside its slot:\n%s", out.stderr)
	}
	if row := out.row(t, "1"); strings.Join(row, " ") != "1 1 0 1 0 0 0 0 0" {
		t.Errorf("report %q:\n%s", row, out.stdout)
	}
}
