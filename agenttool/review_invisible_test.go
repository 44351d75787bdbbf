package agenttool_test

import (
	"encoding/json"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// Regression: invisible characters that are not Unicode category Cf (variation
// selectors, the combining grapheme joiner, Hangul fillers) and a Cf that
// blocks NFKC composition until it is dropped make a new key: the
// "cosmetic variant" runs as a second action.
func TestInvisibleCharactersAreCosmetic(t *testing.T) {
	type pair struct{ name, base, variant string }
	for _, p := range []pair{
		{"zero-width space (control: documented as handled)", "Lunch", "Lun\u200bch"},
		{"variation selector-16 after an emoji", "Lunch \u2615", "Lunch \u2615\ufe0f"},
		{"combining grapheme joiner U+034F", "Lunch", "Lun\u034fch"},
		{"Mongolian free variation selector U+180B", "Lunch", "Lunch\u180b"},
		{"Hangul filler U+3164", "Lunch", "Lunch\u3164"},
		{"Hangul choseong filler U+115F", "Lunch", "Lunch\u115f"},
		{"ZWSP between e and combining acute (Jose\u200b\u0301 vs José)", "Lunch with José", "Lunch with Jose\u200b\u0301"},
		{"ideographic variation selector U+E0100", "Lunch", "Lunch\U000e0100"},
		{"trailing NUL (Cc)", "Lunch", "Lunch\u0000"},
	} {
		m := &mailServer{}
		tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce})
		in := func(subject string) string {
			b, _ := json.Marshal(emailInput{To: "ana@example.com", Subject: subject, Body: "See you at noon."})
			return string(b)
		}
		first := tool.Invoke(scoped(), in(p.base))
		mustStatus(t, first, envelope.Success)
		again := tool.Invoke(scoped(), in(p.variant))
		if m.count() != 1 {
			t.Errorf("%s: subject %+q then %+q: ran again (%s vs %s), %d emails", p.name, p.base, p.variant, first.RequestRef, again.RequestRef, m.count())
		} else {
			t.Logf("%s: held (%s)", p.name, again.Error.Code)
		}
	}
}
