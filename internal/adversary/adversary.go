// Package adversary is an offline model that tries to get a second effect
// past a guarded tool, the way real models do by accident: it repeats
// itself, changes the case of member names and values, adds null members,
// sends partial, empty and malformed input, nests and disguises idempotency
// keys, pastes request references back, and rewords its request after an
// unknown outcome. It drives the example agents through the real
// langchaingo executor, and [Check] says whether the destination and the
// envelopes stayed truthful.
//
// [Model] is the same adversary behind OpenAI's Chat Completions wire
// format, for the examples' -llm openai path: several tool calls in each
// message, chosen with seeded randomness, and moves made on what it reads
// (see [Move]). [RunWire] runs an example against it, and a [Ledger] holds
// every envelope the model read to the destination's effects and the
// store.
package adversary

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode"

	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// Plan is one logical action and the ways the adversary restates it.
type Plan struct {
	Tool string
	// Base is the model's correct call: one JSON object of strings and
	// numbers.
	Base string
	// Reworded is the same action in other words, sent once after the
	// first unknown outcome (a model "fixing" its request).
	Reworded string
}

// Variants returns every restatement of the base call the adversary sends,
// in order: each either is the same action (and must be replayed or
// refused) or is not acceptable input (and must be refused).
func (p Plan) Variants() []string {
	names, values, lits := members(p.Base)
	obj := func(pairs ...string) string { // name, raw JSON value, ...
		var b strings.Builder
		b.WriteByte('{')
		for i := 0; i < len(pairs); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s:%s", quote(pairs[i]), pairs[i+1])
		}
		b.WriteByte('}')
		return b.String()
	}
	base := func(extra ...string) string {
		var pairs []string
		for i, n := range names {
			pairs = append(pairs, n, lits[i])
		}
		return obj(append(pairs, extra...)...)
	}
	with := func(field int, name, value string) string { // base with one member replaced
		var pairs []string
		for i, n := range names {
			if i == field {
				if name != "" {
					pairs = append(pairs, name, value)
				}
				continue
			}
			pairs = append(pairs, n, lits[i])
		}
		return obj(pairs...)
	}
	var out []string
	out = append(out, p.Base, p.Base) // identical repeats
	// Reordered and spaced out.
	var rev []string
	for i := len(names) - 1; i >= 0; i-- {
		rev = append(rev, fmt.Sprintf(" %s : %s ", quote(names[i]), lits[i]))
	}
	out = append(out, "\n{"+strings.Join(rev, ",\n")+"}\n")
	// Member names in another case, alone and beside the real one.
	out = append(out, with(0, title(names[0]), lits[0]))
	var upper []string
	for i, n := range names {
		upper = append(upper, strings.ToUpper(n), lits[i])
	}
	out = append(out, obj(upper...))
	out = append(out, obj(append([]string{names[0], quote("decoy")}, pairs(names, lits, title(names[0]))...)...))
	out = append(out, with(0, "ſ"+names[0][1:], lits[0]))
	// Null members added.
	out = append(out, base(strings.ToUpper(names[len(names)-1]), "null"), base("cc", "null"))
	// Cosmetic variants of every value.
	for i, v := range values {
		if lits[i] != quote(v) { // a number: the same value written otherwise
			for _, w := range []string{quote(v), v + ".0", v + "e0", " " + v} {
				out = append(out, with(i, names[i], w))
			}
			continue
		}
		for _, w := range []string{v + " ", " " + v, strings.ReplaceAll(v, " ", "  "), strings.ReplaceAll(v, " ", "\u00a0"),
			strings.ToUpper(v), titleWords(v), v + "\n", "\u200b" + v, fullWidth(v)} {
			if w != v {
				out = append(out, with(i, names[i], quote(w)))
			}
		}
	}
	// Partial and empty input.
	for i := range names {
		out = append(out, with(i, "", ""), with(i, names[i], "null"), with(i, names[i], `""`), with(i, names[i], `"  "`))
	}
	out = append(out, `{}`, `null`, ``, `[]`, `"`+values[0]+`"`, "["+p.Base+"]", values[0])
	// Keys of the model's own, nested and disguised.
	for _, k := range []string{"idempotency_key", "Idempotency-Key", "idempotency key", "idempotency_key ", "ıdempotency_key",
		"ｉｄｅｍｐｏｔｅｎｃｙ＿ｋｅｙ", "idempotency\u200b_key", "requestId", "dedupe_id", "IdempotencyKeyValue"} {
		out = append(out, base(k, quote("model-key-1")))
	}
	out = append(out, base("meta", `{"idempotency_key":"model-key-2"}`), base("items", `[{"request_id":"model-key-3"}]`))
	out = append(out, "\ufeff"+p.Base)
	return append(out, p.Base) // and once more as it was
}

func pairs(names, lits []string, first string) []string {
	out := []string{first, lits[0]}
	for i := 1; i < len(names); i++ {
		out = append(out, names[i], lits[i])
	}
	return out
}

// Script plays the variants in order, inserting the reworded request once,
// right after the first unknown outcome, and a request that pastes back the
// first request reference it reads. It then answers in words.
func (p Plan) Script() demo.Script {
	variants := p.Variants()
	var mu sync.Mutex
	next, reworded, pasted := 0, false, false
	return func(results []string) langchaintest.Turn {
		mu.Lock()
		defer mu.Unlock()
		call := func(args string) langchaintest.Turn {
			return langchaintest.Call(p.Tool, args)
		}
		if n := len(results); n > 0 {
			last, err := envelope.Parse([]byte(results[n-1]))
			if err == nil && last.Status == envelope.UnknownOutcome && !reworded && p.Reworded != "" {
				reworded = true
				return call(p.Reworded)
			}
			if err == nil && last.RequestRef != "" && !pasted {
				pasted = true
				names, _, lits := members(p.Base)
				var b strings.Builder
				b.WriteString("{")
				for i, name := range names {
					fmt.Fprintf(&b, "%s:%s,", quote(name), lits[i])
				}
				fmt.Fprintf(&b, `"reference":%s}`, quote(last.RequestRef))
				return call(b.String())
			}
		}
		if next < len(variants) {
			next++
			return call(variants[next-1])
		}
		return langchaintest.Final("Done.")
	}
}

// Effects is what a run counted at the destination: after each envelope,
// and at the end.
type Effects struct {
	After []int
	Final int
}

// Check reports every way the run broke the promise: more than want effects
// at the end (want is 1, or 0 where nothing could commit), an envelope that
// claims an effect that is not there, or a refusal during which an effect
// appeared.
func Check(envs []envelope.Envelope, eff Effects, want int) []string {
	var bad []string
	if eff.Final != want {
		bad = append(bad, fmt.Sprintf("the destination ended with %d effects, want %d", eff.Final, want))
	}
	unknownSeen := false
	for i, e := range envs {
		after := eff.After[i]
		before := 0
		if i > 0 {
			before = eff.After[i-1]
		}
		say := func(format string, args ...any) {
			bad = append(bad, fmt.Sprintf("envelope %d %s: %s", i, e.String(), fmt.Sprintf(format, args...)))
		}
		if err := e.Validate(); err != nil {
			say("invalid: %v", err)
		}
		switch e.Status {
		case envelope.Success:
			if after < 1 {
				say("success, but the destination has no effect")
			}
			if !e.Replayed && !e.Reconciled && after != before+1 && !unknownSeen {
				say("a fresh success, but the effects went from %d to %d", before, after)
			}
		case envelope.DefiniteFailure:
			if after != before && !unknownSeen {
				say("definite_failure, but the effects went from %d to %d", before, after)
			}
		case envelope.UnknownOutcome:
			unknownSeen = true
			if after > before+1 {
				say("unknown_outcome, but %d effects appeared", after-before)
			}
		}
		if e.Earlier != nil && e.Earlier.State == envelope.ActionSucceeded && after < 1 {
			say("says the earlier action succeeded, but the destination has no effect")
		}
	}
	return bad
}

// members reads a flat JSON object of strings and numbers, keeping its
// order: each member's name, its value (a string's text, a number's
// digits) and its value as JSON.
func members(obj string) (names, values, lits []string) {
	dec := json.NewDecoder(strings.NewReader(obj))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		panic("adversary: the base call is not a JSON object: " + obj)
	}
	for dec.More() {
		n, _ := dec.Token()
		v, _ := dec.Token()
		switch v := v.(type) {
		case string:
			values, lits = append(values, v), append(lits, quote(v))
		case json.Number:
			values, lits = append(values, v.String()), append(lits, v.String())
		default:
			panic("adversary: the base call has a member that is neither a string nor a number: " + obj)
		}
		names = append(names, n.(string))
	}
	return names, values, lits
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func title(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func titleWords(s string) string {
	words := strings.Fields(s)
	for i, w := range words {
		words[i] = title(strings.ToLower(w))
	}
	return strings.Join(words, " ")
}

// fullWidth writes ASCII letters and digits in their full-width forms.
func fullWidth(s string) string {
	return strings.Map(func(r rune) rune {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return r - '!' + '！'
		}
		return r
	}, s)
}
