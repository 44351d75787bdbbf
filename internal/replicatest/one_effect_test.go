package replicatest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

const (
	replicaCount  = 3
	clientTimeout = 4 * time.Second // how long the model's client waits for an answer
	maxTurns      = 30
	runBudget     = 45 * time.Second // a run's model gives up after this
	defaultRuns   = 14               // every fault on the first email, twice
)

// The environment of the test.
const (
	envRuns    = "RETRYSAFE_REPLICA_RUNS"    // how many seeded runs (default defaultRuns)
	envSeed    = "RETRYSAFE_REPLICA_SEED"    // the seed of the first run (default: from the clock); with RUNS unset, that run alone
	envVerbose = "RETRYSAFE_REPLICA_VERBOSE" // set: log every run's story, not only a failing one's
)

// run is one seeded conversation: a principal, one to three emails, a
// model's style, the faults, and what happened.
type run struct {
	seed      uint64
	rng       *rand.Rand
	principal string
	style     style
	fencing   bool // the mail service checks fencing tokens
	intents   []*intent
	calls     []*call
	turn      int
	elapsed   time.Duration
}

// newRun makes the run of a seed. The first email's fault goes round every
// fault with the seed, so that consecutive seeds meet each; the others
// draw one that involves no process. The mail service checks fencing
// tokens in three runs of four, and always when a replica is paused.
func newRun(seed uint64) *run {
	rng := rand.New(rand.NewPCG(seed, 0x7265706c69636173))
	r := &run{seed: seed, rng: rng, principal: fmt.Sprintf("tenant-%d/user-1", seed), style: style(rng.IntN(2))}
	for i := range 1 + rng.IntN(3) {
		f := fault(seed % uint64(faultCount))
		if i > 0 {
			f = []fault{noFault, noFault, lostReply, slowCommit, lostAnswer}[rng.IntN(5)]
		}
		r.intents = append(r.intents, newIntent(rng, seed, i, f))
	}
	r.fencing = r.intents[0].fault == pauseBeforeWrite || rng.IntN(4) != 0
	return r
}

func (r *run) String() string {
	var faults []string
	for _, in := range r.intents {
		faults = append(faults, in.fault.String())
	}
	fencing := "the mail service checks fencing tokens"
	if !r.fencing {
		fencing = "the mail service does not check fencing tokens"
	}
	return fmt.Sprintf("seed %d: %d email(s), faults [%s], %s model, %s", r.seed, len(r.intents), strings.Join(faults, ", "), r.style, fencing)
}

func (r *run) allDone() bool {
	for _, in := range r.intents {
		if !in.done {
			return false
		}
	}
	return true
}

// think is the time between two turns: the model's, and the user's.
func (r *run) think() time.Duration {
	if r.style == adversarial {
		return time.Duration(r.rng.IntN(150)) * time.Millisecond
	}
	for _, in := range r.intents {
		if !in.done && asksToWait(in.lastAnswers()) {
			return time.Duration(300+r.rng.IntN(300)) * time.Millisecond // it was told to wait
		}
	}
	return time.Duration(50+r.rng.IntN(150)) * time.Millisecond
}

// harness is everything a run needs: the shared PostgreSQL, the replicas,
// the mail service, the round-robin client, and an operator in the test
// process that settles what the model left unknown.
type harness struct {
	schema  string
	store   *pgstore.Store
	op      *agenttool.Operator
	mail    *mailService
	set     *replicaSet
	rr      *roundRobin
	control *http.Client
	mark    int
	// unchecked are runs whose records the last check leaves alone: what
	// they show is checked by their own test.
	unchecked []*run
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	url := pgtest.URL(t)
	h := &harness{schema: pgtest.Schema(t, url), control: &http.Client{Timeout: 5 * time.Second}}
	ctx := context.Background()
	var err error
	if h.store, err = pgstore.Open(ctx, &pgstore.Options{URL: url, Schema: h.schema}); err != nil { // migrates the schema once, before the replicas
		t.Fatal(err)
	}
	t.Cleanup(func() { h.store.Close() })
	h.set = &replicaSet{}
	if h.mail, err = startMailService(h.set); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.mail.close)
	t.Cleanup(h.set.close)
	if err := h.set.launch([]string{"DATABASE_URL=" + url, envSchema + "=" + h.schema, envDestination + "=" + h.mail.url}, replicaCount); err != nil {
		t.Fatal(err)
	}
	h.rr = &roundRobin{set: h.set, http: &http.Client{Timeout: clientTimeout}}
	settler, err := newSendEmail(h.store, destinationClient{url: h.mail.url, replica: "operator", http: &http.Client{}}, agenttool.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if h.op, err = agenttool.NewOperator(h.store, settler); err != nil {
		t.Fatal(err)
	}
	return h
}

// play plays a run to its end: the model's turns, then a quiet moment (no
// replica is paused or serving, every envelope read), then an operator
// settles whatever the model left unknown.
func (h *harness) play(r *run) error {
	faults := map[string]fault{}
	for _, in := range r.intents {
		faults[in.to] = in.fault
	}
	h.mail.beginRun(r.fencing, faults)
	start := time.Now()
	for r.turn = 0; r.turn < maxTurns && time.Since(start) < runBudget && !r.allDone(); r.turn++ {
		r.playTurn(h.rr)
		time.Sleep(r.think())
	}
	h.mail.endRun()
	h.mark++
	if err := h.set.quiesce(h.control, h.mark); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); h.mail.landing() > 0; {
		if time.Now().After(deadline) {
			return errors.New("a write to the mail service did not land within 10s")
		}
		time.Sleep(10 * time.Millisecond) // a slow write lands on its own time
	}
	r.elapsed = time.Since(start)
	return h.settle(r)
}

// refs returns every request reference of the run: in the replicas'
// answers to its principal, and in the writes to its recipients.
func (h *harness) refs(r *run) []string {
	seen := map[string]bool{}
	for _, a := range h.set.envelopes() {
		if a.Principal != r.principal {
			continue
		}
		env, err := envelope.Parse(a.Envelope)
		if err != nil {
			continue
		}
		seen[env.RequestRef] = true
		if env.Earlier != nil {
			seen[env.Earlier.RequestRef] = true
		}
	}
	_, writes := h.mail.snapshot()
	for _, w := range writes {
		if r.has(w.To) && w.Ref != "" {
			seen[w.Ref] = true
		}
	}
	delete(seen, "")
	refs := make([]string, 0, len(seen))
	for ref := range seen {
		refs = append(refs, ref)
	}
	slices.Sort(refs)
	return refs
}

// has reports whether to is the recipient of one of the run's emails.
func (r *run) has(to string) bool {
	for _, in := range r.intents {
		if recipient(in.to) == recipient(to) {
			return true
		}
	}
	return false
}

// settle has an operator reconcile every record of the run that is still
// pending or unknown, as the sweeper would: once its lease has lapsed, the
// mail service says what became of it.
func (h *harness) settle(r *run) error {
	ctx := context.Background()
	for _, ref := range h.refs(r) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			rec, err := h.store.Get(ctx, ref)
			if errors.Is(err, agenttool.ErrNotFound) || (err == nil && (rec.State == agenttool.Succeeded || rec.State == agenttool.Failed || rec.RetryApproved)) {
				break
			}
			if err == nil {
				var v reconcile.Verdict
				if v, err = h.op.Reconcile(ctx, ref, "replicatest"); err == nil && (v == reconcile.Applied || v == reconcile.NotApplied) {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s could not be settled within 20s: %v", ref, err)
			}
			time.Sleep(100 * time.Millisecond) // its lease lapses, or its write lands, on its own time
		}
	}
	return nil
}

// check returns what went wrong in a run: more than one email for one
// intended email, or an envelope or a record that says what did not
// happen.
func (h *harness) check(r *run) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	effects, _ := h.mail.snapshot()
	byRef, byTo := map[string][]effect{}, map[string][]effect{}
	for _, e := range effects {
		byRef[e.Ref] = append(byRef[e.Ref], e)
		byTo[e.To] = append(byTo[e.To], e)
	}
	sentBefore := func(ref string, at time.Time) int {
		n := 0
		for _, e := range byRef[ref] {
			if e.Committed.Before(at) {
				n++
			}
		}
		return n
	}
	sentBy := func(ref string) string {
		var by []string
		for _, e := range byRef[ref] {
			by = append(by, fmt.Sprintf("%s with token %d at %s", e.Replica, e.Token, e.Committed.Format("15:04:05.000")))
		}
		return strings.Join(by, "; ")
	}
	// One email per intended email: one if the model heard it went, at most
	// one otherwise.
	for i, in := range r.intents {
		n := len(byTo[recipient(in.to)])
		switch {
		case n > 1:
			bad("email %d (%s): %d emails went for one intended email", i, in.to, n)
		case in.done && n != 1:
			bad("email %d (%s): the model was told it went, and %d went", i, in.to, n)
		}
	}
	// Every envelope any replica answered tells the truth, when it was
	// answered.
	ctx := context.Background()
	for _, a := range h.set.envelopes() {
		if a.Principal != r.principal {
			continue
		}
		env, err := envelope.Parse(a.Envelope)
		if err != nil {
			bad("%s answered an invalid envelope: %v: %s", a.Replica, err, a.Envelope)
			continue
		}
		at, ref := time.Unix(0, a.At), env.RequestRef
		lie := func(why string) { bad("%s answered %s (path %s): %s", a.Replica, a.Envelope, a.Path, why) }
		if e := env.Earlier; e != nil {
			switch n := sentBefore(e.RequestRef, at); {
			case e.State == envelope.ActionSucceeded && n != 1:
				lie(fmt.Sprintf("it says the earlier action %s was done; %d of its emails had gone", e.RequestRef, n))
			case e.State == envelope.ActionFailed && n != 0:
				lie(fmt.Sprintf("it says the earlier action %s was not done; its email had gone", e.RequestRef))
			}
		}
		switch env.Status {
		case envelope.Success:
			if n := sentBefore(ref, at); n != 1 {
				lie(fmt.Sprintf("success, and %d emails of %s had gone", n, ref))
			}
		case envelope.DefiniteFailure:
			notDone := func() {
				if n := sentBefore(ref, at); n != 0 {
					lie(fmt.Sprintf("definite_failure says it was not done, at %s; the email of %s had gone (sent by %s)", at.Format("15:04:05.000"), ref, sentBy(ref)))
				}
			}
			switch env.Error.Code {
			case envelope.CodeKeyReused:
				// This call ran nothing; what became of the action is in
				// Earlier, checked above.
			case envelope.CodeReplaced:
				if n := len(byRef[ref]); n != 0 {
					lie(fmt.Sprintf("replaced: never done; %d emails of %s went", n, ref))
				}
			case envelope.CodeStoreUnavailable, envelope.CodeCancelled:
				// A call that never reached the action's record says that
				// it did nothing itself, and nothing of the action, which
				// another call may be doing or have done: its note says so
				// (docs/envelope.md). One that says the action was not done
				// is held to it.
				if !strings.HasPrefix(env.Note, agenttool.NoteNotThisCall) {
					notDone()
				}
			default:
				notDone()
			}
		case envelope.UnknownOutcome:
			about := ref
			if env.Earlier != nil {
				about = env.Earlier.RequestRef
			}
			// A record awaits reconciliation, or holds the action; or,
			// since, the action was given back: nothing of it went.
			if _, err := h.store.Get(ctx, about); err != nil && (!errors.Is(err, agenttool.ErrNotFound) || len(byRef[about]) != 0) {
				lie(fmt.Sprintf("unknown_outcome, and no record of %s awaits reconciliation: %v", about, err))
			}
		}
	}
	// Every record, settled, says what happened.
	for _, ref := range h.refs(r) {
		rec, err := h.store.Get(ctx, ref)
		if errors.Is(err, agenttool.ErrNotFound) {
			if n := len(byRef[ref]); n != 0 {
				bad("%s has no record, and %d of its emails went", ref, n)
			}
			continue
		}
		if err != nil {
			bad("%s: %v", ref, err)
			continue
		}
		n := len(byRef[ref])
		switch {
		case rec.State == agenttool.Succeeded && n != 1:
			bad("the record of %s says succeeded; %d of its emails went", ref, n)
		case rec.State == agenttool.Failed && n != 0:
			bad("the record of %s says failed; %d of its emails went", ref, n)
		case rec.State == agenttool.Unknown && rec.RetryApproved && n != 0:
			bad("the record of %s says not applied; %d of its emails went", ref, n)
		case rec.State == agenttool.Pending || (rec.State == agenttool.Unknown && !rec.RetryApproved):
			bad("the record of %s is still %v after the run was settled", ref, rec.State)
		}
	}
	return problems
}

// story tells what happened in a run: the model's calls, the replicas'
// answers and the mail service's writes.
func (h *harness) story(r *run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s; %d turns in %v\n", r, r.turn, r.elapsed.Round(time.Millisecond))
	index := map[*intent]int{}
	for i, in := range r.intents {
		index[in] = i
	}
	b.WriteString("the model's calls:\n")
	for _, c := range r.calls {
		fmt.Fprintf(&b, "  turn %d, email %d, %s %s → %s: ", c.turn, index[c.intent], c.kind, c.args, c.replica)
		if c.err != nil {
			fmt.Fprintf(&b, "no envelope (%v)\n", c.err)
			continue
		}
		fmt.Fprintf(&b, "%s\n", brief(c.env))
	}
	b.WriteString("the replicas' answers:\n")
	for _, a := range h.set.envelopes() {
		if a.Principal != r.principal {
			continue
		}
		env, _ := envelope.Parse(a.Envelope)
		fmt.Fprintf(&b, "  %s %s: %s (%s)\n", time.Unix(0, a.At).Format("15:04:05.000"), a.Replica, brief(env), a.Path)
	}
	b.WriteString("the mail service's writes:\n")
	_, writes := h.mail.snapshot()
	for _, w := range writes {
		if r.has(w.To) {
			fmt.Fprintf(&b, "  %s %s, token %d, from %s: %s\n", w.At.Format("15:04:05.000"), w.Ref, w.Token, w.Replica, w.Fate)
		}
	}
	return b.String()
}

// brief is an envelope in one line.
func brief(env envelope.Envelope) string {
	s := fmt.Sprintf("%s %s next=%s", env.Status, env.RequestRef, env.Next)
	if env.Error != nil {
		s += " " + env.Error.Code
	}
	if env.Replayed {
		s += " replayed"
	}
	if env.Reconciled {
		s += " reconciled"
	}
	if env.Earlier != nil {
		s += fmt.Sprintf(" earlier=%s:%s", env.Earlier.RequestRef, env.Earlier.State)
	}
	return s
}

// seeds returns the seeds to play: RETRYSAFE_REPLICA_RUNS of them from
// RETRYSAFE_REPLICA_SEED (or from the clock); a SEED alone plays one.
func seeds(t *testing.T) []uint64 {
	runs, first := defaultRuns, uint64(time.Now().UnixNano()%1_000_000)
	if v := os.Getenv(envSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a seed, a non-negative integer", envSeed, v)
		}
		first, runs = s, 1
	}
	if v := os.Getenv(envRuns); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of runs, 1 or more", envRuns, v)
		}
		runs = n
	}
	out := make([]uint64, runs)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}

// TestOneEffectPerActionAcrossReplicasAndRestarts deploys send_email as a
// user would across machines: three replica processes of an MCP server
// (mcptool over stateless streamable HTTP) sharing one PostgreSQL, behind
// a round-robin client. A scripted model sends each email, with identical
// resends and rewordings in one turn (spread over the replicas) and across
// turns, following the envelopes' next literally or trusting nothing but a
// confirmation. Faults, one or more per seeded run: a replica SIGKILLed
// before its write arrives or after it was sent and before the outcome is
// recorded, and restarted at once (within the lease); a replica paused
// (SIGSTOP) before its write leaves, past its lease, while another takes
// the action over, then resumed (SIGCONT); a lost reply; a write that
// lands late; a lost answer to the model. The mail service counts the
// emails: one per intended email (none where nothing went), and every
// envelope any replica answered, and every record, says what happened.
//
// RETRYSAFE_REPLICA_RUNS=200 plays more runs; RETRYSAFE_REPLICA_SEED=N
// plays the run of seed N again (a failing run prints its seed).
func TestOneEffectPerActionAcrossReplicasAndRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes and restarts them")
	}
	h := newHarness(t)
	list := seeds(t)
	t.Logf("%d seeded runs from seed %d (%s=%d plays one again)", len(list), list[0], envSeed, list[0])
	var failed []uint64
	faults, kinds, unheard := map[fault]int{}, map[string]int{}, 0
	for _, seed := range list {
		r := newRun(seed)
		err := h.play(r)
		problems := h.check(r)
		if err != nil {
			problems = append(problems, err.Error())
		}
		if os.Getenv(envVerbose) != "" {
			t.Log(h.story(r))
		}
		if len(problems) > 0 {
			failed = append(failed, seed)
			t.Errorf("%s=%d: %s\n%s\n%s", envSeed, seed, r, strings.Join(problems, "\n"), h.story(r))
		}
		for _, in := range r.intents {
			faults[in.fault]++
			if !in.done {
				unheard++
			}
		}
		for _, c := range r.calls {
			kinds[c.kind]++
		}
	}
	effects, writes := h.mail.snapshot()
	stale, resumed := 0, map[string]int{}
	for _, w := range writes {
		if strings.HasPrefix(w.Fate, "refused") {
			stale++
		}
		if why, ok := strings.CutPrefix(w.Fate, "resumed (SIGCONT) "); ok {
			resumed[why]++
		}
	}
	t.Logf("%d runs, %d failed %v; faults %v; calls %v; %d emails sent; %d intended emails the model never heard went (settled by the operator); paused replicas resumed %v; %d stale writes refused",
		len(list), len(failed), failed, faults, kinds, len(effects), unheard, resumed, stale)
	h.set.mu.Lock()
	restarts, failures := slices.Clone(h.set.restartT), slices.Clone(h.set.failed)
	h.set.mu.Unlock()
	for _, err := range failures {
		t.Errorf("a replica: %v", err)
	}
	within := 0
	for _, d := range restarts {
		if d < lease {
			within++
		}
	}
	t.Logf("%d replicas killed and restarted, %d within the lease (%v); the slowest restart took %v", len(restarts), within, lease, slices.Max(append(restarts, 0)))

	t.Run("a destination that cannot check fencing tokens", h.unfencedPause)
	h.checkEveryRecord(t)
	h.checkReplicasRaceFree(t)
}

// unfencedPause shows what remains where the destination cannot check
// fencing tokens: a replica paused (SIGSTOP) after its last look at its
// context, before its write leaves, past its lease and AttemptTimeout and
// ClockSkew; another replica takes the action over, is told "not found"
// (which it now trusts), and sends; the paused one is resumed (SIGCONT) and
// its write lands too. Two emails for one intended email: no lease can
// stop a paused process, only a destination that refuses its older token
// can (the seeded runs above, where the same pause ends in one email).
func (h *harness) unfencedPause(t *testing.T) {
	const seed = 1 << 40 // no seeded run's
	r := &run{seed: seed, rng: rand.New(rand.NewPCG(seed, 1)), principal: "tenant-unfenced/user-1", style: literal}
	r.intents = []*intent{newIntent(r.rng, seed, 0, pauseBeforeWrite)}
	h.unchecked = append(h.unchecked, r)
	if err := h.play(r); err != nil {
		t.Fatal(err)
	}
	to := recipient(r.intents[0].to)
	ref, paused, token := h.mail.pausedWrite(to)
	var sent []effect
	effects, _ := h.mail.snapshot()
	for _, e := range effects {
		if e.To == to {
			sent = append(sent, e)
		}
	}
	if ref == "" || len(sent) != 2 || sent[0].Replica == paused || sent[0].Token <= token ||
		sent[1].Ref != ref || sent[1].Replica != paused || sent[1].Token != token {
		t.Fatalf("want two emails: the takeover's, then the paused replica's late write with its older token %d; got %+v\n%s", token, sent, h.story(r))
	}
	t.Logf("two emails for one: %s sent %s with token %d after taking it over; then %s, resumed, sent it with token %d\n%s",
		sent[0].Replica, ref, sent[0].Token, paused, token, h.story(r))
}

// checkEveryRecord checks every record in the store, whichever run made
// it, against the emails that went.
func (h *harness) checkEveryRecord(t *testing.T) {
	ctx := context.Background()
	rows, err := h.store.Pool().Query(ctx, "SELECT key FROM "+pgx.Identifier{h.schema, "records"}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	effects, _ := h.mail.snapshot()
	byRef := map[string]int{}
	for _, e := range effects {
		byRef[e.Ref]++
	}
	skip := map[string]bool{}
	for _, r := range h.unchecked {
		for _, ref := range h.refs(r) {
			skip[ref] = true
		}
	}
	for _, key := range keys {
		if skip[key] {
			continue
		}
		rec, err := h.store.Get(ctx, key)
		if err != nil {
			t.Errorf("%s: %v", key, err)
			continue
		}
		switch n := byRef[key]; {
		case n > 1:
			t.Errorf("%s: %d emails went", key, n)
		case rec.State == agenttool.Succeeded && n != 1, rec.State == agenttool.Failed && n != 0, rec.RetryApproved && n != 0:
			t.Errorf("the record of %s says %v (retry approved %v); %d emails went", key, rec.State, rec.RetryApproved, n)
		}
	}
	t.Logf("%d records, each agreeing with the mail service", len(keys)-len(skip))
}

// checkReplicasRaceFree fails the test if a replica process met a data
// race (the race detector writes to its standard error).
func (h *harness) checkReplicasRaceFree(t *testing.T) {
	for _, s := range h.set.stderr() {
		if strings.Contains(s, "DATA RACE") {
			t.Errorf("a replica met a data race:\n%s", s)
		}
	}
}
