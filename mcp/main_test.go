package mcp

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init() // the re-executed sandbox init never returns
	os.Exit(m.Run())
}

// mustPolicy builds a policy from spec or fails the test.
func mustPolicy(t *testing.T, spec policy.Spec) *policy.Policy {
	t.Helper()
	p, err := policy.New(spec)
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	return p
}

// newServer returns a server for cfg whose sessions come from newSession
// when it is non-nil (a fake), else from the real sandbox.
func newServer(t *testing.T, cfg Config, newSession NewSessionFunc) *Server {
	t.Helper()
	cfg.NewSession = newSession
	if cfg.NewSession == nil {
		sink := cfg.Audit
		cfg.NewSession = func(ctx context.Context, p *policy.Policy) (Session, error) {
			s, err := sandbox.NewSession(ctx, sandbox.Config{Policy: p, Audit: sink})
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// connect links a client to s over in-memory transports. The returned
// wait blocks until the server side has seen the client go.
func connect(t *testing.T, s *Server) (cs *sdk.ClientSession, closeAndWait func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	ct, st := sdk.NewInMemoryTransports()
	ss, err := s.srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server Connect: %v", err)
	}
	cs, err = sdk.NewClient(&sdk.Implementation{Name: "airlock-test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client Connect: %v", err)
	}
	closeAndWait = func() {
		cs.Close()
		ss.Wait()
	}
	t.Cleanup(closeAndWait)
	return cs, closeAndWait
}

// call calls a tool and decodes its structured content into out (when
// non-nil). Protocol errors fail the test; tool errors are returned in res.
func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s, %v): protocol error %v", name, args, err)
	}
	if out != nil && res.StructuredContent != nil {
		data, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("CallTool(%s): structured content %s: %v", name, data, err)
		}
	}
	return res
}

// text joins the text content of res.
func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
