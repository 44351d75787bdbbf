package opcmd_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
)

// help, -h and COMMAND -h print the commands with their flags on stdout;
// a command line that cannot run prints what is wrong on stderr and exits
// 2.
func TestUsage(t *testing.T) {
	f := boltFixture(t)
	help := f.run("help").ok(t).stdout
	for _, want := range []string{
		"Usage: myapp retrysafe [global flags] COMMAND",
		"-json", "list [-after REF] [-label TEXT] [-limit N] [-principal P] [-tool T]",
		"show REF", "stats [-principal P] [-tool T]", "reconcile REF -by WHO",
		"resolve applied REF -attempts N -by WHO -why TEXT [-result JSON]",
		"resolve not-applied REF -attempts N -by WHO -why TEXT",
		"approve REF -attempts N -by WHO -why TEXT [-compensate] [-retry-once]",
		"sweep [-batch N] [-concurrency N] [-interval DURATION] [-once] [-rest DURATION]",
		"help", "Exit codes: 0 ok, 1 the operation failed, 2 usage, 3 no such record, 4 held by a live call",
		"5 stale", "6 not awaiting reconciliation",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help does not say %q:\n%s", want, help)
		}
	}
	if h := f.run("-h").ok(t).stdout; h != help {
		t.Errorf("-h differs from help:\n%s", h)
	}
	if h := f.run("resolve", "not-applied", "-h").ok(t).stdout; !strings.Contains(h, "resolve not-applied REF -attempts N") || strings.Contains(h, "stats") {
		t.Errorf("resolve not-applied -h:\n%s", h)
	}

	if r := f.run().exits(t, opcmd.ExitUsage); !strings.Contains(r.stderr, "Usage: myapp retrysafe") {
		t.Errorf("no command: %s", r.stderr)
	}
	f.run("lsit").exits(t, opcmd.ExitUsage, `there is no command "lsit"`, "Run 'myapp retrysafe help'")
	f.run("list", "-x").exits(t, opcmd.ExitUsage, "flag provided but not defined: -x")
	f.run("-x", "list").exits(t, opcmd.ExitUsage, "flag provided but not defined: -x")
}

// A standalone program (cmd/retrysafe) refuses the commands that need the
// application's tools, before it opens anything, and says where to run
// them; the others run.
func TestStandaloneRefusesWhatNeedsTheApplication(t *testing.T) {
	f := boltFixture(t)
	a := f.lostRefund("tenant-1", "", "A-1", "before")
	standalone := &opcmd.Options{Standalone: true}
	for _, args := range [][]string{
		{"reconcile", a.RequestRef, "-by", "maria"},
		{"sweep", "-once"},
		{"approve", a.RequestRef, "-compensate", "-by", "maria", "-why", "cancelled"},
	} {
		f.runWith(context.Background(), standalone, args...).
			exits(t, opcmd.ExitUsage, "needs the application's own tools", "application's mount of package agenttool/opcmd")
	}
	if len(f.pay.undoneRefs()) != 0 {
		t.Fatal("a refused compensation ran")
	}
	if h := f.runWith(context.Background(), standalone, "help").ok(t).stdout; strings.Count(h, "Not here: it needs the application's tools") != 2 {
		t.Errorf("standalone help does not mark reconcile and sweep:\n%s", h)
	}
	f.runWith(context.Background(), standalone, "approve", a.RequestRef, "-retry-once", "-attempts", "1", "-by", "maria", "-why", "the bank has none").ok(t)
	if rec := f.record(a.RequestRef); !rec.RetryApproved {
		t.Errorf("standalone approve -retry-once: %+v", rec)
	}
}

// Options.Open is asked for the operator once the command line is valid,
// with whether the command writes; its errors are printed as they are.
func TestOpen(t *testing.T) {
	f := boltFixture(t)
	a := f.lostEmail("tenant-1", "", "a@example.com", "before")
	var asked []string
	var store string
	opts := &opcmd.Options{
		Flags: func(fs *flag.FlagSet) { fs.StringVar(&store, "store", "", "the store") },
		Open: func(ctx context.Context, settles bool) (*agenttool.Operator, error) {
			asked = append(asked, fmt.Sprint(store, " ", settles))
			switch store {
			case "":
				return nil, fmt.Errorf("%w: name a store with -store", opcmd.ErrUsage)
			case "down":
				return nil, errors.New("the store is down")
			}
			return f.op, nil
		},
	}
	run := func(args ...string) result { return f.runWith(context.Background(), opts, args...) }
	run("-store", "app", "list").ok(t)
	run("-store", "app", "-json", "resolve", "not-applied", a.RequestRef, "-attempts", "1", "-by", "maria", "-why", "none").ok(t)
	run("-store", "app", "resolve", "applied", a.RequestRef, "-attempts", "1", "-by", "maria").exits(t, opcmd.ExitUsage, "-why is required")
	run("list").exits(t, opcmd.ExitUsage, "name a store with -store")
	run("-store", "down", "show", a.RequestRef).exits(t, opcmd.ExitFailed, "retrysafe show: the store is down")
	if got := fmt.Sprint(asked); got != "[app false app true  false down false]" {
		t.Errorf("Open was asked %s", got)
	}
	if h := run("help").ok(t).stdout; !strings.Contains(h, "-store STRING") {
		t.Errorf("help does not list the program's flag:\n%s", h)
	}
	if r := f.runWith(context.Background(), &opcmd.Options{}, "list"); r.code != opcmd.ExitOK {
		t.Errorf("Options without Open: exit %d", r.code)
	}
	var none result
	var out, errs strings.Builder
	none.code = opcmd.Run(context.Background(), nil, []string{"list"}, &out, &errs, nil)
	if none.code != opcmd.ExitFailed || !strings.Contains(errs.String(), "no operator") {
		t.Errorf("no operator: exit %d, %q", none.code, errs.String())
	}
}
