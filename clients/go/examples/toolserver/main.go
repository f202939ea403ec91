// Command toolserver serves tools to cogmesh agents: a cogmesh.tools.v1.ToolService in Go.
//
//	toolserver -listen 127.0.0.1:7001
//
// List it in the runtime's COGMESH_TOOL_SERVERS_FILE, and name its tools (with the
// prefix) in an agent's `tools`:
//
//	servers:
//	  text:
//	    transport: grpc
//	    address: 127.0.0.1:7001
//	    prefix: go_            # the agent sees go_word_count and go_reverse
//
// Tools: word_count {text} counts words; reverse {text} reverses the text. A call with
// bad arguments is a tool error (is_error), which the model reads; an unknown tool is
// NOT_FOUND. It logs one JSON line per event on stdout, the first being
// {"event": "serving", "address": ...}, serves grpc.health.v1, and stops gracefully on
// SIGTERM or SIGINT.
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
	"sort"
	"strings"
	"syscall"

	commonv1 "cogmesh.dev/go/gen/cogmesh/common/v1"
	toolsv1 "cogmesh.dev/go/gen/cogmesh/tools/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// textSchema is the JSON Schema of both tools' arguments.
var textSchema = map[string]interface{}{
	"type":       "object",
	"properties": map[string]interface{}{"text": map[string]interface{}{"type": "string"}},
	"required":   []interface{}{"text"},
}

type tool struct {
	description string
	run         func(text string) (content string, structured map[string]interface{})
}

var tools = map[string]tool{
	"word_count": {"Count the words of a text.", func(text string) (string, map[string]interface{}) {
		words := len(strings.Fields(text))
		return fmt.Sprint(words), map[string]interface{}{"words": words}
	}},
	"reverse": {"Reverse a text.", func(text string) (string, map[string]interface{}) {
		runes := []rune(text)
		for i, j := 0, len(runes)-1; i < j; i, j = i+1, j-1 {
			runes[i], runes[j] = runes[j], runes[i]
		}
		return string(runes), nil
	}},
}

type server struct {
	toolsv1.UnimplementedToolServiceServer
}

func (server) ListTools(context.Context, *toolsv1.ListToolsRequest) (*toolsv1.ListToolsResponse, error) {
	parameters, err := structpb.NewStruct(textSchema)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "schema: %v", err)
	}
	reply := &toolsv1.ListToolsResponse{}
	for name, t := range tools {
		reply.Tools = append(reply.Tools, &commonv1.ToolSpec{Name: name, Description: t.description, Parameters: parameters})
	}
	sort.Slice(reply.Tools, func(i, j int) bool { return reply.Tools[i].Name < reply.Tools[j].Name })
	return reply, nil
}

func (server) CallTool(_ context.Context, req *toolsv1.CallToolRequest) (*toolsv1.CallToolResponse, error) {
	logEvent(map[string]interface{}{
		"event": "call", "tool": req.GetName(), "call_id": req.GetCallId(),
		"session_id": req.GetSessionId(), "tenant_id": req.GetTenantId(),
	})
	t, ok := tools[req.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no tool named %q", req.GetName())
	}
	text, ok := req.GetArguments().GetFields()["text"].GetKind().(*structpb.Value_StringValue)
	if !ok {
		return &toolsv1.CallToolResponse{Content: "text: a string is required", IsError: true}, nil
	}
	content, structured := t.run(text.StringValue)
	reply := &toolsv1.CallToolResponse{Content: content}
	if structured != nil {
		s, err := structpb.NewStruct(structured)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "result: %v", err)
		}
		reply.StructuredContent = s
	}
	return reply, nil
}

func logEvent(fields map[string]interface{}) {
	line, _ := json.Marshal(fields) // plain strings and numbers: cannot fail
	fmt.Println(string(line))
}

func main() {
	listen := flag.String("listen", "127.0.0.1:7001", "address to serve on (port 0: any free port)")
	flag.Parse()
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("toolserver: %v", err)
	}
	grpcServer := grpc.NewServer()
	toolsv1.RegisterToolServiceServer(grpcServer, server{})
	healthpb.RegisterHealthServer(grpcServer, health.NewServer()) // "" is SERVING: what probes ask

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		grpcServer.GracefulStop()
	}()
	logEvent(map[string]interface{}{"event": "serving", "address": listener.Addr().String()})
	if err := grpcServer.Serve(listener); err != nil {
		log.Fatalf("toolserver: %v", err)
	}
}
