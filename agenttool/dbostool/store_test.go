package dbostool_test

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/retrysafe/retrysafe/agenttool"
)

// retrysafe's store shares DBOS's database, each in a schema of its own:
// DBOS's tables in dbos, the store's in the schema pgstore.Options names.
// A workflow's step is recorded by both, and each finds its own.
func TestStoreSharesDBOSDatabase(t *testing.T) {
	db := newDB(t)
	store := db.store(t, "agent_keys")
	m := &mailer{db: db, class: agenttool.Keyed}
	wf := sendOnce(step(t, m.tool(t, store, agenttool.Options{}), nil))
	ctx := launch(t, db.url, func(ctx dbos.Context) { dbos.RegisterWorkflow(ctx, wf, dbos.WithWorkflowName("send")) })
	env := run(t, ctx, wf, job{User: "tenant-42/user-7", Args: toAna}, "shared-1")
	if code(env) != "success" {
		t.Fatalf("the step answered %s", env)
	}

	q := context.Background()
	rows, err := db.pool.Query(q, `SELECT table_schema || '.' || table_name FROM information_schema.tables
		WHERE table_catalog = current_database() AND table_schema IN ('dbos', 'agent_keys')`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dbos.workflow_status", "dbos.operation_outputs", "agent_keys.records"} {
		if !slices.Contains(tables, want) {
			t.Errorf("the database has no %s; it has %v", want, tables)
		}
	}
	var records int
	if err := db.pool.QueryRow(q, `SELECT count(*) FROM agent_keys.records WHERE key = $1`, env.RequestRef).Scan(&records); err != nil {
		t.Fatal(err)
	}
	if records != 1 {
		t.Errorf("the store holds %d records of %s, want 1", records, env.RequestRef)
	}
	var name, output string
	if err := db.pool.QueryRow(q, `SELECT function_name, output FROM dbos.operation_outputs WHERE workflow_uuid = 'shared-1'`).Scan(&name, &output); err != nil {
		t.Fatal(err)
	}
	recorded, _ := base64.StdEncoding.DecodeString(output) // DBOS's JSON, in base64
	if name != "send_email" || !strings.Contains(string(recorded), `"request_ref":"`+env.RequestRef+`"`) {
		t.Errorf("DBOS recorded step %q with output %s; want send_email, the envelope of %s", name, recorded, env.RequestRef)
	}
}
