package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/policy"
)

// CallTool runs the tool name with args when allowed_tools grants it and
// Config.Tools implements it. A tool that is not granted is never invoked;
// one that is granted but not implemented returns an error wrapping
// ErrNoTool. The tool's result and error are returned unchanged.
func (g *Guard) CallTool(ctx context.Context, name string, args map[string]any) (any, error) {
	if err := g.charge("call", name); err != nil {
		return nil, err
	}
	if err := g.policy.CheckTool(name); err != nil {
		var de *policy.DenyError
		if !errors.As(err, &de) {
			return nil, err
		}
		de.Op = "call"
		return nil, g.deny(audit.LayerTool, de, "")
	}
	fn := g.tools[name]
	if fn == nil {
		return nil, fmt.Errorf("guard: call %s: %w: register it in Config.Tools", name, ErrNoTool)
	}
	g.allow(audit.LayerTool, "call", name, policy.AllowedTools, "")
	return fn(ctx, args)
}
