// Command hookserver vetoes tool calls of cogmesh agents: a cogmesh.policy.v1.HookService in Go.
//
//	hookserver -listen 127.0.0.1:7002 -deny go_reverse,send_email
//
// Register it in the policy service's policy.yaml (COGMESH_POLICY_DIR) as a
// PreToolUse hook; fail: closed denies the call when the hook cannot answer:
//
//	hooks:
//	  - event: PreToolUse
//	    matcher: ".*"
//	    remote: 127.0.0.1:7002
//	    timeout_ms: 500
//	    fail: closed
//
// PreToolUse denies every tool named in -deny, with a reason the model and the client
// see, and lets every other call through unchanged. The other hook events are not
// implemented (UNIMPLEMENTED): register this server for PreToolUse only. It logs one
// JSON line per event on stdout, the first being {"event": "serving", "address": ...},
// serves grpc.health.v1, and stops gracefully on SIGTERM or SIGINT.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	policyv1 "cogmesh.dev/go/gen/cogmesh/policy/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type hooks struct {
	policyv1.UnimplementedHookServiceServer
	denied map[string]bool
}

func (h hooks) PreToolUse(_ context.Context, req *policyv1.PreToolUseRequest) (*policyv1.PreToolUseResponse, error) {
	deny := h.denied[req.GetToolName()]
	logEvent(map[string]interface{}{
		"event": "PreToolUse", "tool": req.GetToolName(), "deny": deny, "tool_call_id": req.GetToolCallId(),
		"session_id": req.GetContext().GetSessionId(), "turn_id": req.GetContext().GetTurnId(),
		"agent": req.GetContext().GetAgent(),
	})
	if !deny {
		return &policyv1.PreToolUseResponse{}, nil
	}
	return &policyv1.PreToolUseResponse{Deny: true, Reason: fmt.Sprintf("%s is denied by the Go hook", req.GetToolName())}, nil
}

func logEvent(fields map[string]interface{}) {
	line, _ := json.Marshal(fields) // plain strings and booleans: cannot fail
	fmt.Println(string(line))
}

func main() {
	listen := flag.String("listen", "127.0.0.1:7002", "address to serve on (port 0: any free port)")
	deny := flag.String("deny", "", "comma-separated tool names to deny")
	flag.Parse()
	denied := map[string]bool{}
	for _, name := range strings.Split(*deny, ",") {
		if name = strings.TrimSpace(name); name != "" {
			denied[name] = true
		}
	}
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("hookserver: %v", err)
	}
	grpcServer := grpc.NewServer()
	policyv1.RegisterHookServiceServer(grpcServer, hooks{denied: denied})
	healthpb.RegisterHealthServer(grpcServer, health.NewServer()) // "" is SERVING: what probes ask

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		grpcServer.GracefulStop()
	}()
	logEvent(map[string]interface{}{"event": "serving", "address": listener.Addr().String()})
	if err := grpcServer.Serve(listener); err != nil {
		log.Fatalf("hookserver: %v", err)
	}
}
