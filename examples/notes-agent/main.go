// Command notes-agent: seed 001's append_note, made safe. An agent appends a
// note to incident INC-104; the note is a local write committed in the same
// bbolt transaction that records it under the action's key, so the effect
// and its record cannot disagree after a crash.
//
//	go run ./examples/notes-agent -crash-at after-effect   # the process dies
//	go run ./examples/notes-agent                          # finishes the action: one note
//
// The action's key comes from trusted code (the step id "request-001", as an
// orchestrator would give it), so the model rewording the note is refused
// rather than appended twice.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/langchain/langchaintest"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/demo"
)

// crashAt is where -crash-at kills the process.
var crashAt string

var example = demo.Example{
	Name: "notes-agent",
	Faults: []demo.Fault{
		{Name: "none", Help: "everything works (use -crash-at to kill the process)"},
		{Name: "closed-incident", Help: "the incident is closed and refuses notes: a definite failure"},
	},
	Prompt:    "Add a note to incident INC-104: check the carrier scan.",
	Principal: "tenant-42/oncall",
	Session:   "incident-INC-104",
	Label:     "on-call, INC-104",
	DefaultDB: filepath.Join(os.TempDir(), "retrysafe-notes-agent.db"),
	Flags: func(fs *flag.FlagSet) {
		fs.StringVar(&crashAt, "crash-at", "", "kill the process at before-effect, after-effect or after-record")
	},
	Context: func(ctx context.Context) context.Context {
		return agenttool.WithActionID(ctx, "request-001") // the orchestrator's step id
	},
	Setup:  setup,
	Script: script,
}

func main() { demo.Main(example) }

type noteInput struct {
	IncidentID string `json:"incident_id" desc:"incident, e.g. INC-104"`
	Text       string `json:"text"`
}

var errClosed = errors.New("incident is closed")

// crash kills the process at the named point, as a power cut would: no
// deferred code, no flush.
func crash(out io.Writer, at string) {
	if crashAt != at {
		return
	}
	fmt.Fprintf(out, "  *** killing the process %s ***\n", at)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func setup(ctx context.Context, env *demo.Env) (*demo.Scenario, error) {
	switch crashAt {
	case "", "before-effect", "after-effect", "after-record":
	default:
		return nil, fmt.Errorf("unknown -crash-at %q; choose before-effect, after-effect or after-record", crashAt)
	}
	store, err := boltstore.Open(env.DB, nil)
	if err != nil {
		return nil, err
	}
	notes := func() int {
		n := 0
		store.DB().View(func(tx *bolt.Tx) error {
			if b := tx.Bucket([]byte("incident-notes/INC-104")); b != nil {
				n = b.Stats().KeyN
			}
			return nil
		})
		return n
	}
	appendNote := func(ctx context.Context, in noteInput) (json.RawMessage, error) {
		crash(env.Out, "before-effect")
		res, err := store.Effect(ctx, func(tx *bolt.Tx) (json.RawMessage, error) {
			if in.IncidentID != "INC-104" { // the incident system has one incident, and knows its id exactly
				return nil, envelope.MarkDefinite(fmt.Errorf("no incident %q", in.IncidentID), "no_such_incident")
			}
			if env.Fault == "closed-incident" {
				return nil, envelope.MarkDefinite(errClosed, "incident_closed")
			}
			b, err := tx.CreateBucketIfNotExists([]byte("incident-notes/" + in.IncidentID))
			if err != nil {
				return nil, err
			}
			n, err := b.NextSequence()
			if err != nil {
				return nil, err
			}
			note, _ := json.Marshal(map[string]string{"text": in.Text, "request_ref": agenttool.RequestRef(ctx)})
			if err := b.Put([]byte(strconv.FormatUint(n, 10)), note); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"note_number":` + strconv.FormatUint(n, 10) + `,"outcome":"recorded"}`), nil
		})
		if err == nil {
			fmt.Fprintf(env.Out, "  notes: committed %s together with its key\n", res)
		}
		crash(env.Out, "after-effect")
		return res, err
	}
	tool, err := agenttool.New("append_note", "Append a note to an incident. Input: a JSON object with incident_id and text.", appendNote, agenttool.Options{
		Store:      store,
		Class:      agenttool.Reconcilable,
		Reconciler: store.Reconciler(),
		Hooks: agenttool.Hooks{Outcome: func(_ context.Context, _ agenttool.OutcomeEvent) {
			crash(env.Out, "after-record")
		}},
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	return &demo.Scenario{
		Tools:   []*agenttool.Tool{tool},
		Effects: notes,
		Final: func(w io.Writer) {
			fmt.Fprintf(w, "INC-104 notes: %d\n", notes())
		},
		Close: func() { store.Close() },
	}, nil
}

// script plays a real, imperfect model: it appends the note; after an
// unknown outcome it appends again; once done, it rewords the note and
// tries to append it again under the same step.
func script(fault string) demo.Script {
	const note = `{"incident_id":"INC-104","text":"Check carrier scan"}`
	const reworded = `{"incident_id":"INC-104","text":"Check the carrier's scan history"}`
	return func(results []string) langchaintest.Turn {
		call := func(args string) langchaintest.Turn {
			return langchaintest.Call("append_note", args)
		}
		if len(results) == 0 {
			return call(note)
		}
		last, err := envelope.Parse([]byte(results[len(results)-1]))
		if err != nil {
			return langchaintest.Final("The tool's answer was unreadable.")
		}
		switch {
		case last.Status == envelope.Success:
			return call(reworded)
		case last.Error != nil && last.Error.Code == envelope.CodeKeyReused:
			return langchaintest.Final("The note is on INC-104; the reworded copy was refused, so there is exactly one.")
		case last.Status == envelope.UnknownOutcome && len(results) < 3:
			return call(note)
		case last.Status == envelope.UnknownOutcome:
			return langchaintest.Final("The note may be on INC-104; it is being verified.")
		}
		return langchaintest.Final("I could not add the note: " + last.Error.Message)
	}
}
