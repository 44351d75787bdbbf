package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// doctor says what a store sees of its server's replication, as an
// operator reads it before trusting at-most-once tools to it: refused
// where the primary streams to a standby asynchronously, made once a
// synchronous standby has each commit, and what a standby is.
func TestDoctorSaysWhatEachClassGetsFromTheServersReplication(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL servers")
	}
	primary := pgtest.StartServer(t)
	standby := primary.Standby(t)
	if _, _, err := pgstore.Migrate(context.Background(), &pgstore.Options{URL: primary.URL()}); err != nil {
		t.Fatal(err)
	}
	env := []string{"DATABASE_URL=" + primary.URL()}
	report := func(args ...string) doctorReport {
		t.Helper()
		out := inProcess(t, env, append([]string{"-json", "doctor"}, args...)...).ok(t).stdout
		var r doctorReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("doctor -json: %v\n%s", err, out)
		}
		return r
	}

	r := report()
	if r.Standbys != 1 || r.SynchronousStandbyNames != "" || r.Standby || r.Timeline == 0 {
		t.Errorf("an asynchronous standby: %+v", r.Replication)
	}
	for _, c := range []string{"at_most_once", "reconcilable"} {
		if !strings.HasPrefix(r.Classes[c], "REFUSED") || !strings.Contains(r.Classes[c], "synchronous_mode") {
			t.Errorf("%s under an asynchronous standby: %q; want it refused, naming the fix", c, r.Classes[c])
		}
	}
	if !strings.HasPrefix(r.Classes["keyed"], "claims are made") {
		t.Errorf("keyed: %q", r.Classes["keyed"])
	}
	if c := report("-accept-async-standbys").Classes["at_most_once"]; !strings.HasPrefix(c, "claims are made") || !strings.Contains(c, "unknown_outcome") {
		t.Errorf("at_most_once with the risk accepted: %q; want made, with what the failover window does", c)
	}
	text := inProcess(t, env, "doctor").ok(t).stdout
	for _, want := range []string{"primary", "1 streaming", "at_most_once  REFUSED"} {
		if !strings.Contains(text, want) {
			t.Errorf("doctor's text lacks %q:\n%s", want, text)
		}
	}

	primary.Synchronous(t, true)
	if c := report().Classes["at_most_once"]; !strings.HasPrefix(c, "claims are made") || !strings.Contains(c, "synchronous standby has it") {
		t.Errorf("at_most_once under a synchronous standby: %q", c)
	}

	var out string
	for range 200 { // until the standby has replayed the migration
		res := inProcess(t, []string{"DATABASE_URL=" + standby.URL()}, "doctor")
		if out = res.stdout; res.code == opcmd.ExitOK {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out, "standby (in recovery") {
		t.Errorf("doctor on the standby:\n%s", out)
	}
	inProcess(t, nil, "-db", filepath.Join(t.TempDir(), "app.db"), "doctor").exits(t, opcmd.ExitUsage, "doctor is for PostgreSQL")
}
