package config_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

// loadMarker precedes each example in docs/configuration.md, besides the
// full example, that is a complete file and must load.
const loadMarker = "<!-- docs test: this example must load -->"

func readDocs(t *testing.T) string {
	t.Helper()
	md, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Skipf("docs not found: %v", err)
	}
	return string(md)
}

// The full example in docs/configuration.md must load, so the docs cannot
// drift from the loader.
func TestDocsExampleLoads(t *testing.T) {
	md := readDocs(t)
	_, rest, ok := strings.Cut(md, "## Full example")
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

// Every example marked with loadMarker must load, and one of them is the
// dual example on the memory intake.
func TestDocsMarkedExamplesLoad(t *testing.T) {
	rest := readDocs(t)
	n, dual := 0, false
	for {
		var ok bool
		if _, rest, ok = strings.Cut(rest, loadMarker); !ok {
			break
		}
		// The block must follow the marker directly.
		body, found := strings.CutPrefix(strings.TrimLeft(rest, " \n"), "```yaml\n")
		if !found {
			t.Fatalf("docs: marker %d is not followed by a yaml block", n+1)
		}
		yml, _, _ := strings.Cut(body, "```")
		n++
		c, err := config.LoadBytes([]byte(yml), noEnv)
		if err != nil {
			t.Fatalf("docs: marked example %d does not load: %v", n, err)
		}
		if c.WAL.Type == "dual" && c.Intake.Type == "memory" {
			dual = true
		}
	}
	if !dual {
		t.Fatalf("docs: none of the %d marked examples is wal.type: dual on intake.type: memory", n)
	}
}

// Every intake key has a row in docs/configuration.md.
func TestDocsListEveryIntakeKey(t *testing.T) {
	md := readDocs(t)
	for _, key := range yamlKeys(reflect.TypeFor[config.IntakeConfig](), "intake") {
		if !strings.Contains(md, "| `"+key+"`") {
			t.Errorf("docs: no row for %s", key)
		}
	}
}

// yamlKeys lists the dotted leaf keys of a struct type, recursing into
// nested structs. An optional block (a pointer) is listed too, since its
// presence is a rule of its own.
func yamlKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		key := prefix + "." + name
		ft := f.Type
		if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
			keys = append(keys, key)
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			keys = append(keys, yamlKeys(ft, key)...)
		} else {
			keys = append(keys, key)
		}
	}
	return keys
}
