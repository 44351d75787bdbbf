package temporaltool

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/retrysafe/retrysafe/agenttool"
)

// budget is the longest one call of a tool may take, as far as its
// settings bound it: the parts of the worst path through Tool.Invoke.
type budget struct {
	wait    time.Duration // waiting for another holder of the key or of the scope (WaitTimeout)
	checks  int           // checks of the destination: the fence's, after a takeover, after the attempt
	check   time.Duration // CheckTimeout
	retries time.Duration // the retry window inside one call (Retry.MaxElapsed), if the tool retries
	attempt time.Duration // the last attempt (AttemptTimeout)
	writes  int           // store writes: the claim, a claim after a fence or a takeover, the record
	write   time.Duration // StoreTimeout
}

func budgetOf(s agenttool.Settings) budget {
	b := budget{attempt: s.AttemptTimeout}
	if s.Retry.MaxAttempts > 1 {
		b.retries = s.Retry.MaxElapsed
	}
	if s.Class == agenttool.ReadOnly {
		return b // nothing stored, nothing waited for or checked
	}
	b.wait = max(s.WaitTimeout, 0)
	b.writes, b.write = 3, s.StoreTimeout
	if s.Class == agenttool.Keyed || s.Class == agenttool.Reconcilable {
		b.checks, b.check = 3, s.CheckTimeout
	}
	return b
}

func (b budget) total() time.Duration {
	return b.wait + time.Duration(b.checks)*b.check + b.retries + b.attempt + time.Duration(b.writes)*b.write
}

// String says what the budget is made of, for an error a person reads.
func (b budget) String() string {
	var parts []string
	if b.wait > 0 {
		parts = append(parts, fmt.Sprintf("a wait of %v", b.wait))
	}
	if b.checks > 0 {
		parts = append(parts, fmt.Sprintf("%d checks of %v", b.checks, b.check))
	}
	if b.retries > 0 {
		parts = append(parts, fmt.Sprintf("a retry window of %v", b.retries))
	}
	parts = append(parts, fmt.Sprintf("an attempt of %v", b.attempt))
	if b.writes > 0 {
		parts = append(parts, fmt.Sprintf("%d store writes of %v", b.writes, b.write))
	}
	return strings.Join(parts, ", ")
}

// Budget returns the longest one call of the tool may take, as far as its
// settings bound it: WaitTimeout, three checks of CheckTimeout (for a
// Keyed or Reconcilable tool: the unknown fence's, the check after a
// takeover, the check after the attempt), the retry window inside the
// call if the tool retries, AttemptTimeout, and three store writes of
// StoreTimeout. It does not bound an Approver, a tool or a store that
// ignores its context, nor a scope whose other actions keep changing
// hands under the call. LateWindow is not in it: an attempt ends at its
// deadline, and only its request stays open past it.
func (a *Activity) Budget() time.Duration { return a.budget.total() }

// retryWindow is the longest ScheduleToCloseTimeout that keeps every
// retry of the activity within the life of the action's record: KeyTTL,
// less Lease (as invariant I7 asks of any retry window) and ClockSkew.
func (a *Activity) retryWindow() time.Duration {
	s := a.settings
	return s.KeyTTL - s.Lease - s.ClockSkew
}

// ActivityOptions returns activity options that fit the tool:
// StartToCloseTimeout covers the longest call ([Activity.Budget], rounded
// up to a second, plus a second), HeartbeatTimeout is the tool's Lease
// (a retry can do nothing for the action before the lease of a dead
// attempt lapses), and ScheduleToCloseTimeout ends Temporal's retries
// while the action's record is kept (KeyTTL less Lease and ClockSkew).
// RetryPolicy is left to Temporal's default: retries without a count,
// bounded by ScheduleToCloseTimeout. Set the task queue and the rest
// yourself.
func (a *Activity) ActivityOptions() workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout:    (a.Budget() + time.Second - 1).Truncate(time.Second) + time.Second,
		HeartbeatTimeout:       a.settings.Lease,
		ScheduleToCloseTimeout: a.retryWindow(),
	}
}

// startSlack is what a ScheduleToCloseTimeout must leave beyond the
// tool's budget for an attempt to be dispatched and started: an attempt
// starts only with the whole budget still left.
const startSlack = time.Second

// fits reports what in an activity's timeouts does not fit the tool, or
// nil. maxAttempts is the retry policy's MaximumAttempts (0: no count).
func (a *Activity) fits(startToClose, scheduleToClose time.Duration, maxAttempts int32) error {
	if scheduleToClose > 0 {
		startToClose = min(startToClose, scheduleToClose) // Temporal ends an attempt at the earlier of the two
	}
	if need := a.Budget(); startToClose < need {
		return fmt.Errorf("%w: activity %s: StartToCloseTimeout %v (or ScheduleToCloseTimeout, if shorter) is shorter than the longest call of tool %q, %v (%v): "+
			"Temporal would cut a call it has not finished, and an action cut during its attempt is left unknown; "+
			"set it to %v or more (Activity.ActivityOptions does)", ErrConfig, a.name, startToClose, a.tool.Name(), need, a.budget,
			a.ActivityOptions().StartToCloseTimeout)
	}
	if need := a.Budget() + startSlack; scheduleToClose > 0 && scheduleToClose < need {
		return fmt.Errorf("%w: activity %s: ScheduleToCloseTimeout %v leaves no time to start tool %q: an attempt begins only with its longest call (%v) still left, "+
			"and the first one is dispatched and started after it is scheduled, so every attempt would be refused; set it to %v or more (Activity.ActivityOptions does)",
			ErrConfig, a.name, scheduleToClose, a.tool.Name(), a.Budget(), need)
	}
	if a.settings.Class == agenttool.ReadOnly || maxAttempts == 1 {
		return nil // nothing is kept, or Temporal never retries
	}
	if window := a.retryWindow(); scheduleToClose <= 0 || scheduleToClose > window {
		now := fmt.Sprintf("ScheduleToCloseTimeout %v lets", scheduleToClose)
		if scheduleToClose <= 0 {
			now = "without a ScheduleToCloseTimeout,"
		}
		return fmt.Errorf("%w: activity %s: %s Temporal retry it later than tool %q keeps an action's outcome "+
			"(KeyTTL %v, less Lease %v and ClockSkew %v: %v): a retry after that would find no record and act again; "+
			"set ScheduleToCloseTimeout to %v or less (Activity.ActivityOptions does), or raise the tool's KeyTTL",
			ErrConfig, a.name, now, a.tool.Name(), a.settings.KeyTTL, a.settings.Lease, a.settings.ClockSkew, window, window)
	}
	return nil
}
