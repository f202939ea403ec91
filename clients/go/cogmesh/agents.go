package cogmesh

// Agents as versioned resources (cogmesh.gateway.v1.AgentService, docs/agent-versions.md):
// every change stores a new immutable version, aliases ("prod", "canary") point at one, and
// a session opened on "name", "name@7" or "name@prod" keeps the version it resolved to
// (Session.AgentVersion) until MoveSession moves it.

import (
	"context"

	commonv1 "cogmesh.dev/go/gen/cogmesh/common/v1"
	gatewayv1 "cogmesh.dev/go/gen/cogmesh/gateway/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// unary runs one call of the generated stubs under the client's deadline, its error decoded.
func unary[Req, Res any](c *Client, ctx context.Context, call func(context.Context, Req, ...grpc.CallOption) (Res, error), req Req) (Res, error) {
	ctx, cancel := c.unaryContext(ctx)
	defer cancel()
	reply, err := call(ctx, req)
	if err != nil {
		var none Res
		return none, FromError(err)
	}
	return reply, nil
}

// ListSessions reads one page of the tenant's sessions, newest first, filtered by the
// request (Agent and AgentVersion: the sessions on an agent's version). A filtered page may
// be short, even empty, while NextPageToken is set: keep paging until it is "".
func (c *Client) ListSessions(ctx context.Context, req *gatewayv1.ListSessionsRequest) (*gatewayv1.ListSessionsResponse, error) {
	return unary(c, ctx, c.Gateway.ListSessions, req)
}

// MoveSession makes a session run agentRef ("name", "name@7" or "name@prod", resolved to a
// version now) from its next turn on: UpdateSession with the mask path "agent". A running
// turn keeps the definition it started with.
func (c *Client) MoveSession(ctx context.Context, sessionID, agentRef string) (*commonv1.Session, error) {
	req := &gatewayv1.UpdateSessionRequest{
		SessionId:  sessionID,
		Agent:      agentRef,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"agent"}},
	}
	reply, err := unary(c, ctx, c.Gateway.UpdateSession, req)
	return reply.GetSession(), err
}

// CreateAgent stores version 1 of a new agent (needs the key's agents:write). The
// definition is an agent file's fields (structpb.NewStruct) without name and prompts_dir.
func (c *Client) CreateAgent(ctx context.Context, req *gatewayv1.CreateAgentRequest) (*gatewayv1.AgentVersion, error) {
	reply, err := unary(c, ctx, c.Agents.CreateAgent, req)
	return reply.GetAgent(), err
}

// UpdateAgent stores the whole new definition as the agent's next version; with
// ExpectedVersion, ABORTED when another change came first.
func (c *Client) UpdateAgent(ctx context.Context, req *gatewayv1.UpdateAgentRequest) (*gatewayv1.AgentVersion, error) {
	reply, err := unary(c, ctx, c.Agents.UpdateAgent, req)
	return reply.GetAgent(), err
}

// GetAgent reads an agent's latest version; Name "name@7" or Version a given one, Name
// "name@prod" or Alias the one an alias points at.
func (c *Client) GetAgent(ctx context.Context, req *gatewayv1.GetAgentRequest) (*gatewayv1.AgentVersion, error) {
	reply, err := unary(c, ctx, c.Agents.GetAgent, req)
	return reply.GetAgent(), err
}

// ListAgentVersions reads one page of an agent's versions, newest first, and every alias.
func (c *Client) ListAgentVersions(ctx context.Context, req *gatewayv1.ListAgentVersionsRequest) (*gatewayv1.ListAgentVersionsResponse, error) {
	return unary(c, ctx, c.Agents.ListAgentVersions, req)
}

// DeleteAgent deletes an agent with every version and alias.
func (c *Client) DeleteAgent(ctx context.Context, req *gatewayv1.DeleteAgentRequest) (*gatewayv1.DeleteAgentResponse, error) {
	return unary(c, ctx, c.Agents.DeleteAgent, req)
}

// SetAgentAlias points an alias at a version, creating or moving it.
func (c *Client) SetAgentAlias(ctx context.Context, req *gatewayv1.SetAgentAliasRequest) (*gatewayv1.SetAgentAliasResponse, error) {
	return unary(c, ctx, c.Agents.SetAgentAlias, req)
}

// DeleteAgentAlias removes an alias; the reply says which version it pointed at.
func (c *Client) DeleteAgentAlias(ctx context.Context, req *gatewayv1.DeleteAgentAliasRequest) (*gatewayv1.DeleteAgentAliasResponse, error) {
	return unary(c, ctx, c.Agents.DeleteAgentAlias, req)
}
