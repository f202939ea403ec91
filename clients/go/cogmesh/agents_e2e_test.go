package cogmesh_test

// Agents as versioned resources from Go, against the live suite of e2e_test.go (dev mode:
// every caller may write agents).

import (
	"testing"

	"cogmesh.dev/go/cogmesh"
	gatewayv1 "cogmesh.dev/go/gen/cogmesh/gateway/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
)

// definition is one the local model runs like the built-in default: the calculator, an inline prompt.
func definition(t *testing.T, prompt string) *structpb.Struct {
	out, err := structpb.NewStruct(map[string]interface{}{
		"model": "local", "tools": []interface{}{"calculator"}, "system_prompt": prompt,
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sessionsOn pages through every session on an agent's version (a filtered page may be short).
func sessionsOn(t *testing.T, client *cogmesh.Client, agent string, version int64) []string {
	ctx := testContext(t)
	var ids []string
	token := ""
	for {
		page, err := client.ListSessions(ctx, &gatewayv1.ListSessionsRequest{
			Agent: agent, AgentVersion: version, PageSize: 100, PageToken: token,
		})
		if err != nil {
			t.Fatalf("list the sessions on %s@%d: %v", agent, version, err)
		}
		for _, s := range page.GetSessions() {
			ids = append(ids, s.GetSessionId())
		}
		if token = page.GetNextPageToken(); token == "" {
			return ids
		}
	}
}

func TestAgentVersionsFromGo(t *testing.T) {
	ctx := testContext(t)
	client := dial(t, gatewayAddress(t, "COGMESH_E2E_GATEWAY"))
	const name = "gotutor"

	created, err := client.CreateAgent(ctx, &gatewayv1.CreateAgentRequest{Name: name, Definition: definition(t, "You are tutor one.")})
	if err != nil || created.GetVersion() != 1 || created.GetNative() {
		t.Fatalf("create: %v, %v", created, err)
	}
	updated, err := client.UpdateAgent(ctx, &gatewayv1.UpdateAgentRequest{
		Name: name, Definition: definition(t, "You are tutor two."), ExpectedVersion: 1,
	})
	if err != nil || updated.GetVersion() != 2 {
		t.Fatalf("update: %v, %v", updated, err)
	}
	_, err = client.UpdateAgent(ctx, &gatewayv1.UpdateAgentRequest{Name: name, Definition: definition(t, "stale"), ExpectedVersion: 1})
	if e := cogmesh.FromError(err); e == nil || e.Code != codes.Aborted {
		t.Fatalf("a stale update gave %v, want Aborted", err)
	}
	alias, err := client.SetAgentAlias(ctx, &gatewayv1.SetAgentAliasRequest{Name: name, Alias: "prod", Version: 1})
	if err != nil || alias.GetPreviousVersion() != 0 || alias.GetAgent().GetVersion() != 1 {
		t.Fatalf("set alias: %v, %v", alias, err)
	}
	byAlias, err := client.GetAgent(ctx, &gatewayv1.GetAgentRequest{Name: name + "@prod"})
	if err != nil || byAlias.GetVersion() != 1 || byAlias.GetDefinition().GetFields()["system_prompt"].GetStringValue() != "You are tutor one." {
		t.Fatalf("get %s@prod: %v, %v", name, byAlias, err)
	}
	versions, err := client.ListAgentVersions(ctx, &gatewayv1.ListAgentVersionsRequest{Name: name})
	if err != nil || len(versions.GetVersions()) != 2 || versions.GetVersions()[0].GetVersion() != 2 || versions.GetAliases()["prod"] != 1 {
		t.Fatalf("list versions: %v, %v", versions, err)
	}

	// A session opened on the alias keeps version 1 until moved.
	session := newSession(ctx, t, client, name+"@prod")
	if got := run(ctx, t, client, session, "What is 2 + 2?").Final.GetText(); got == "" {
		t.Fatal("the turn on version 1 gave no answer")
	}
	if ids := sessionsOn(t, client, name, 1); len(ids) != 1 || ids[0] != session {
		t.Fatalf("sessions on version 1: %v, want [%s]", ids, session)
	}
	moved, err := client.MoveSession(ctx, session, name+"@2")
	if err != nil || moved.GetAgentVersion() != 2 {
		t.Fatalf("move: %v, %v", moved, err)
	}
	if ids := sessionsOn(t, client, name, 2); len(ids) != 1 || ids[0] != session {
		t.Fatalf("sessions on version 2: %v, want [%s]", ids, session)
	}
	_, err = client.MoveSession(ctx, session, name+"@9")
	if e := cogmesh.FromError(err); e == nil || e.Code != codes.NotFound {
		t.Fatalf("moving to a missing version gave %v, want NotFound", err)
	}

	// A bad definition is INVALID_ARGUMENT naming its field under definition.
	bad := definition(t, "x")
	bad.Fields["model"] = structpb.NewStringValue("no-such-model-anywhere")
	_, err = client.CreateAgent(ctx, &gatewayv1.CreateAgentRequest{Name: "gobroken", Definition: bad})
	e := cogmesh.FromError(err)
	if e == nil || e.Code != codes.InvalidArgument || len(e.Violations) == 0 || e.Violations[0].Field != "definition.model" {
		t.Fatalf("a bad model gave %v (violations %+v)", err, e)
	}

	gone, err := client.DeleteAgentAlias(ctx, &gatewayv1.DeleteAgentAliasRequest{Name: name, Alias: "prod"})
	if err != nil || gone.GetPreviousVersion() != 1 {
		t.Fatalf("delete alias: %v, %v", gone, err)
	}
	deleted, err := client.DeleteAgent(ctx, &gatewayv1.DeleteAgentRequest{Name: name})
	if err != nil || deleted.GetDeletedVersions() != 2 {
		t.Fatalf("delete: %v, %v", deleted, err)
	}
	_, err = client.GetAgent(ctx, &gatewayv1.GetAgentRequest{Name: name})
	if e := cogmesh.FromError(err); e == nil || e.Code != codes.NotFound {
		t.Fatalf("get after delete gave %v, want NotFound", err)
	}
}
