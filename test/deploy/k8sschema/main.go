// Command k8sschema writes the JSON schemas kubeconform validates against,
// from sources the Go module proxy serves, because kubeconform's default
// schema location (a GitHub repository) cannot be reached where this
// repository's tests run:
//
//   - every Kubernetes kind, from the OpenAPI v2 document in the
//     k8s.io/kubernetes module (api/openapi-spec/swagger.json);
//   - CustomResourceDefinitions (the Prometheus Operator's ServiceMonitor),
//     from their openAPIV3Schema.
//
// The output follows kubeconform's file naming ({kind}{-group}-{version}
// .json, lower case, the group cut at its first dot) and the "strict"
// flavour of openapi2jsonschema, which kubeconform -strict expects: every
// object with declared properties refuses unknown ones
// (additionalProperties: false), so a misspelt or misplaced field fails.
// Like openapi2jsonschema, every type also admits null (an empty YAML
// value), int-or-string admits both, and a quantity admits a number.
//
// Each kind's schema is standalone (references inlined); a reference back
// into itself (only the CRD-schema types are recursive) is left open.
//
// Usage: k8sschema -swagger swagger.json [-crd file.yaml …] -out DIR
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/goccy/go-yaml"
)

func main() {
	var crds multi
	swagger := flag.String("swagger", "", "Kubernetes OpenAPI v2 document (swagger.json)")
	flag.Var(&crds, "crd", "CustomResourceDefinition YAML file (repeatable)")
	out := flag.String("out", "", "output directory")
	flag.Parse()
	if *swagger == "" || *out == "" {
		flag.Usage()
		os.Exit(64)
	}
	n, err := run(*swagger, crds, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8sschema:", err)
		os.Exit(1)
	}
	fmt.Printf("k8sschema: %d schemas in %s\n", n, *out)
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func run(swaggerPath string, crds []string, out string) (int, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return 0, err
	}
	raw, err := os.ReadFile(swaggerPath)
	if err != nil {
		return 0, err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return 0, fmt.Errorf("%s: %w", swaggerPath, err)
	}
	if len(doc.Definitions) == 0 {
		return 0, fmt.Errorf("%s: no definitions", swaggerPath)
	}
	n := 0
	for name, def := range doc.Definitions {
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk, _ := g.(map[string]any)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			if kind == "" || version == "" {
				continue
			}
			s := inline(doc.Definitions, name, map[string]bool{})
			if err := write(out, kind, group, version, s); err != nil {
				return n, err
			}
			n++
		}
	}
	for _, p := range crds {
		k, err := crdSchemas(p, out)
		if err != nil {
			return n, fmt.Errorf("%s: %w", p, err)
		}
		n += k
	}
	return n, nil
}

// fileName is kubeconform's {{ .ResourceKind }}{{ .KindSuffix }}.json.
func fileName(kind, group, version string) string {
	suffix := "-" + version
	if group != "" {
		suffix = "-" + strings.Split(group, ".")[0] + suffix
	}
	return strings.ToLower(kind + suffix + ".json")
}

func write(dir, kind, group, version string, schema any) error {
	b, err := json.Marshal(schema)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fileName(kind, group, version)), b, 0o644)
}

const (
	intOrString = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
	quantity    = "io.k8s.apimachinery.pkg.api.resource.Quantity"
)

// inline returns the definition name with every $ref replaced by the
// definition it names, made strict and nullable. onPath holds the
// definitions being inlined above this one (a cycle is left open).
func inline(defs map[string]map[string]any, name string, onPath map[string]bool) any {
	switch name {
	case intOrString:
		return map[string]any{"oneOf": []any{
			map[string]any{"type": []any{"string", "null"}},
			map[string]any{"type": []any{"integer", "null"}},
		}}
	case quantity:
		return map[string]any{"oneOf": []any{
			map[string]any{"type": []any{"string", "null"}},
			map[string]any{"type": []any{"number", "null"}},
		}}
	}
	def, ok := defs[name]
	if !ok || onPath[name] {
		return map[string]any{}
	}
	onPath[name] = true
	defer delete(onPath, name)
	return convert(def, func(ref string) any {
		return inline(defs, strings.TrimPrefix(ref, "#/definitions/"), onPath)
	})
}

// convert copies one schema node: resolves $ref through deref, drops
// descriptions (size), adds null to every type and closes every object
// that declares its properties.
func convert(node any, deref func(string) any) any {
	switch x := node.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			return deref(ref)
		}
		if x["format"] == "int-or-string" || x["x-kubernetes-int-or-string"] == true {
			return map[string]any{"oneOf": []any{
				map[string]any{"type": []any{"string", "null"}},
				map[string]any{"type": []any{"integer", "null"}},
			}}
		}
		out := make(map[string]any, len(x))
		for k, v := range x {
			switch k {
			case "description", "x-kubernetes-group-version-kind":
				continue
			case "properties", "patternProperties", "definitions":
				props := map[string]any{}
				for pk, pv := range v.(map[string]any) {
					props[pk] = convert(pv, deref)
				}
				out[k] = props
			default:
				out[k] = convert(v, deref)
			}
		}
		if t, ok := out["type"].(string); ok {
			out["type"] = []any{t, "null"}
		}
		if _, has := out["properties"]; has {
			if _, set := out["additionalProperties"]; !set && x["x-kubernetes-preserve-unknown-fields"] != true {
				out["additionalProperties"] = false
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, v := range x {
			out[i] = convert(v, deref)
		}
		return out
	default:
		return x
	}
}

// crdSchemas writes one schema per served version of the CRD in path.
func crdSchemas(path, out string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var crd struct {
		Spec struct {
			Group string `yaml:"group"`
			Names struct {
				Kind string `yaml:"kind"`
			} `yaml:"names"`
			Versions []struct {
				Name   string `yaml:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
				} `yaml:"schema"`
			} `yaml:"versions"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return 0, err
	}
	if crd.Spec.Names.Kind == "" || len(crd.Spec.Versions) == 0 {
		return 0, errors.New("not a CustomResourceDefinition with versions")
	}
	n := 0
	for _, v := range crd.Spec.Versions {
		s := v.Schema.OpenAPIV3Schema
		if s == nil {
			continue
		}
		// The API server fills these in for every object; the CRD schema
		// leaves metadata open.
		conv := convert(s, func(string) any { return map[string]any{} })
		if err := write(out, crd.Spec.Names.Kind, crd.Spec.Group, v.Name, conv); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
