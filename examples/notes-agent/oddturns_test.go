package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/adversary"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// Odd turns for append_note, one action (step request-001): a case
// change, a look-alike letter, a split note — at most one note.
func TestAdversary_OneNoteUnderOddTurns(t *testing.T) {
	const note = `{"incident_id":"INC-104","text":"Check carrier scan"}`
	const lower = `{"incident_id":"inc-104","text":"Check carrier scan"}`
	const other = `{"incident_id":"INC-105","text":"Check carrier scan"}`
	const split1 = `{"incident_id":"INC-104","text":"Check carrier"}`
	const split2 = `{"incident_id":"INC-104","text":"scan"}`
	const cyr = `{"incident_id":"INС-104","text":"Check carrier scan"}`
	turns := map[string][][]string{
		"lower-first": {{lower}, {note}, {split1, split2}, {}},
		"other-first": {{other}, {note, split1}, {}},
		"cyr-first":   {{cyr}, {note}, {}},
		"split":       {{split1, split2}, {note}, {}},
		"parallel":    {{note, lower, split1, cyr, note}, {split2}, {}},
	}
	for _, fault := range []string{"none", "closed-incident"} {
		for name, tt := range turns {
			for _, conc := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/%t", fault, name, conc), func(t *testing.T) {
					ex := example
					if conc {
						ex.Loop = adversary.ConcurrentLoop
					}
					srv := httptest.NewServer(&demo.ScriptedOpenAI{Tool: "append_note", Turns: tt})
					defer srv.Close()
					env := map[string]string{"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_MODEL": "m"}
					var out bytes.Buffer
					sum, err := demo.Run(context.Background(), ex, []string{"-llm", "openai", "-fault", fault, "-db", filepath.Join(t.TempDir(), "r.db")}, &out,
						func(k string) string { return env[k] })
					if err != nil {
						t.Fatalf("%v\n%s", err, out.String())
					}
					fresh := 0
					for _, e := range sum.Envelopes {
						if e.Status == envelope.Success && !e.Replayed {
							fresh++
						}
					}
					if sum.Effects > 1 || fresh > sum.Effects || (sum.Effects == 0 && fresh > 0) {
						t.Errorf("%d notes, %d fresh successes\n%s", sum.Effects, fresh, out.String())
					}
				})
			}
		}
	}
}
