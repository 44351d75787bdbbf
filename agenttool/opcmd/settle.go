package opcmd

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
)

// The commands by which a person settles a record: resolve applied,
// resolve not-applied, approve.

func (r *runner) defineResolveApplied(fs *flag.FlagSet) action {
	result := fs.String("result", "", "the destination's result, as JSON (what calls will replay); none if not given")
	var attempts optionalInt
	fs.Var(&attempts, "attempts", "the record's attempts as list or show printed them (required): a record that had another attempt since is not settled")
	by, why := settlerFlags(fs)
	return func(ctx context.Context, args []string) error {
		ref, err := wantRef(args)
		if err != nil {
			return err
		}
		if err := attempts.required(); err != nil {
			return err
		}
		if err := settler(*by, *why); err != nil {
			return err
		}
		var raw json.RawMessage
		if *result != "" {
			if err := json.Unmarshal([]byte(*result), new(any)); err != nil {
				return usagef("-result is not valid JSON (%v): give the destination's result as JSON, e.g. -result '{\"message_id\":\"<m-1@mail>\"}'", err)
			}
			raw = json.RawMessage(*result)
		}
		op, err := r.operator(ctx)
		if err != nil {
			return err
		}
		if err := op.ResolveApplied(ctx, ref, attempts.n, raw, *by, *why); err != nil {
			return err
		}
		return r.printSettled(ref, "applied", *by, *why, attempts.n,
			"calls of this action now replay it as a success; nothing runs again")
	}
}

func (r *runner) defineResolveNotApplied(fs *flag.FlagSet) action {
	var attempts optionalInt
	fs.Var(&attempts, "attempts", "the record's attempts as list or show printed them (required): a record that had another attempt since is not settled")
	by, why := settlerFlags(fs)
	return func(ctx context.Context, args []string) error {
		ref, err := wantRef(args)
		if err != nil {
			return err
		}
		if err := attempts.required(); err != nil {
			return err
		}
		if err := settler(*by, *why); err != nil {
			return err
		}
		op, err := r.operator(ctx)
		if err != nil {
			return err
		}
		if err := op.ResolveNotApplied(ctx, ref, attempts.n, *by, *why); err != nil {
			return err
		}
		return r.printSettled(ref, "not applied", *by, *why, attempts.n,
			"the next call of this action runs the tool once more, with the same key")
	}
}

func (r *runner) defineApprove(fs *flag.FlagSet) action {
	retryOnce := fs.Bool("retry-once", false, "allow exactly one more attempt, with the same key (the effect did not happen)")
	compensate := fs.Bool("compensate", false, "run the tool's compensating action and close the action as cancelled")
	var attempts optionalInt
	fs.Var(&attempts, "attempts", "the record's attempts as list or show printed them (required): a record that had another attempt since is not settled")
	by, why := settlerFlags(fs)
	return func(ctx context.Context, args []string) error {
		ref, err := wantRef(args)
		if err != nil {
			return err
		}
		if *retryOnce == *compensate {
			return usagef("say what to do: -retry-once or -compensate (one of them)")
		}
		if *compensate && r.opts.Standalone {
			return needsApp("approve -compensate")
		}
		if err := attempts.required(); err != nil {
			return err
		}
		if err := settler(*by, *why); err != nil {
			return err
		}
		op, err := r.operator(ctx)
		if err != nil {
			return err
		}
		if *retryOnce {
			if err := op.ResolveNotApplied(ctx, ref, attempts.n, *by, *why); err != nil {
				return err
			}
			return r.printSettled(ref, "not applied", *by, *why, attempts.n,
				"one more attempt is approved: the next call of this action runs the tool once more, with the same key")
		}
		if err := op.Compensate(ctx, ref, attempts.n, *by, *why); err != nil {
			return err
		}
		return r.printSettled(ref, "compensated", *by, *why, attempts.n,
			"the compensating action ran; calls of this action now answer that it was cancelled")
	}
}

// settlerFlags defines -by and -why, which every settlement by a person
// requires.
func settlerFlags(fs *flag.FlagSet) (by, why *string) {
	by = fs.String("by", "", "who settles it (required): recorded with the record")
	why = fs.String("why", "", "why (required): recorded with the record")
	return by, why
}

func settler(by, why string) error {
	if err := required("by", by, "who settles it"); err != nil {
		return err
	}
	return required("why", why, "why, in a few words")
}

// optionalInt is an int flag that knows whether it was given.
type optionalInt struct {
	n   int
	set bool
}

func (o *optionalInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.Itoa(o.n)
}

func (o *optionalInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a whole number of attempts, 0 or more")
	}
	o.n, o.set = n, true
	return nil
}

func (o *optionalInt) required() error {
	if !o.set {
		return usagef("-attempts is required: the record's attempts as list or show printed them, so that a record that had another attempt since is not settled by a finding about an earlier one")
	}
	return nil
}
