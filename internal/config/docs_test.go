package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

// The full example in docs/configuration.md must load, so the docs cannot
// drift from the loader.
func TestDocsExampleLoads(t *testing.T) {
	md, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Skipf("docs not found: %v", err)
	}
	_, rest, ok := strings.Cut(string(md), "## Full example")
	if !ok {
		t.Fatal(`docs: no "## Full example" section`)
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	if !ok {
		t.Fatal("docs: full example has no yaml block")
	}
	yml, _, _ := strings.Cut(rest, "```")
	c, err := config.LoadBytes([]byte(yml), noEnv)
	if err != nil {
		t.Fatalf("docs example does not load: %v", err)
	}
	if len(c.Sources) == 0 {
		t.Fatal("docs example has no sources")
	}
}
