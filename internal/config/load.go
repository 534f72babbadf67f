package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
)

// Load reads, interpolates, decodes, defaults, env-overrides and validates
// the configuration.
//
// With path == "" it uses $ANKUSA_CONFIG if set, else DefaultPath if that
// file exists, else Default(). A path that was named (argument or
// ANKUSA_CONFIG) must exist: silently running the demo config because of a
// typo in a path would be worse than refusing to start.
//
// getenv nil means the process environment, as LoadEnv(path, os.Environ());
// a getenv of its own (tests) skips the unknown-override check, which needs
// every variable's name. Violations are returned as Errors (possibly
// wrapped), so callers can list them.
func Load(path string, getenv func(string) (string, bool)) (*Config, error) {
	if getenv == nil {
		return LoadEnv(path, os.Environ())
	}
	return load(path, getenv, nil)
}

// LoadEnv is Load over environ (os.Environ's form, "NAME=value"). Besides
// the lookups, it refuses every ANKUSA_* variable that is neither an
// override (envOverrides), ANKUSA_CONFIG, nor a variable the file
// interpolates: a misspelt override would otherwise change nothing, and the
// node would run with a setting the operator believes is set.
func LoadEnv(path string, environ []string) (*Config, error) {
	vars := map[string]string{}
	var names []string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := vars[k]; !dup {
			names = append(names, k)
		}
		vars[k] = v
	}
	return load(path, func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}, names)
}

// load is Load; names, when not nil, are every variable's name, for the
// unknown-override check.
func load(path string, getenv func(string) (string, bool), names []string) (*Config, error) {
	if path == "" {
		if p, ok := getenv("ANKUSA_CONFIG"); ok && p != "" {
			path = p
		} else if _, err := os.Stat(DefaultPath); err == nil {
			path = DefaultPath
		} else if errors.Is(err, fs.ErrNotExist) {
			c, err := finish(Default(), getenv, unknownEnv(names, nil))
			if err != nil {
				return nil, fmt.Errorf("config (built-in default): %w", err)
			}
			return c, nil
		} else {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		// The *PathError already names the file.
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := loadBytes(data, getenv, names)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// LoadBytes is Load for a file's content already in memory. getenv nil means
// os.LookupEnv.
func LoadBytes(data []byte, getenv func(string) (string, bool)) (*Config, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	return loadBytes(data, getenv, nil)
}

func loadBytes(data []byte, lookup func(string) (string, bool), names []string) (*Config, error) {
	// The variables the file interpolates are the operator's own, whatever
	// their names: never an unknown override.
	referenced := map[string]bool{}
	getenv := func(k string) (string, bool) {
		referenced[k] = true
		return lookup(k)
	}
	text, err := interpolate(data, getenv)
	if err != nil {
		return nil, err
	}

	// First decode into a generic tree: it tells which keys were written
	// (so defaults never overwrite an explicit value, 0 included), lets
	// every unknown key be reported by its dotted path, and catches
	// scalars goccy would otherwise coerce silently (port: 1.5 -> 1,
	// tenant: 007 -> "7").
	var tree any
	if err := yaml.Unmarshal(text, &tree); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", yamlError{err})
	}
	present := map[string]bool{}
	var errs Errors
	checkShape(tree, reflect.TypeFor[Config](), "", present, &errs)
	if len(errs) > 0 {
		return nil, errs
	}

	var c Config
	// DisallowUnknownField is a backstop: checkShape has already refused
	// unknown keys with a better message.
	if err := yaml.UnmarshalWithOptions(text, &c, yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("decode YAML: %w", yamlError{err})
	}
	applyDefaults(&c, func(key string) bool { return present[key] })
	return finish(&c, lookup, unknownEnv(names, referenced))
}

// finish applies env overrides and validates, reporting both kinds of
// violation together.
func finish(c *Config, getenv func(string) (string, bool), unknown Errors) (*Config, error) {
	setBy, errs := applyEnv(c, getenv)
	errs = append(unknown, errs...)
	completeIntakeMemory(c)
	if err := c.Validate(); err != nil {
		var verrs Errors
		if !errors.As(err, &verrs) {
			return nil, err
		}
		for _, e := range verrs {
			// Point at the env var: the operator will not find the bad
			// value in the file.
			if env, ok := setBy[e.Key]; ok {
				e.Rule += " (set by " + env + ")"
			}
		}
		errs = append(errs, verrs...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// yamlError prints goccy's error on one line ("[3:7] message") without the
// multi-line source excerpt, because the binary reports config errors as a
// single log line before exiting.
type yamlError struct{ err error }

func (e yamlError) Error() string { return yaml.FormatError(e.err, false, false) }
func (e yamlError) Unwrap() error { return e.err }

// checkShape walks the generic YAML tree next to the Go type it will be
// decoded into. It records every non-null key in present (by dotted path)
// and appends an Error for each unknown key and each value of the wrong
// kind. Null values count as absent, so "key:" or "key: ~" takes the
// default.
func checkShape(node any, t reflect.Type, path string, present map[string]bool, errs *Errors) {
	if node == nil {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[StringList]() {
		if s, ok := node.(string); ok {
			node = []any{s} // one string is a one-element list
		}
	}
	bad := func(want string) {
		key := path
		if key == "" {
			key = "(top level)"
		}
		got := describe(node)
		if (t.Kind() == reflect.String || t == reflect.TypeFor[StringList]()) && !shownInClearKey(path) {
			// A string key /v1/config would hide may hold a secret written
			// without quotes (secret: 987654321): name its kind only.
			got = describeKind(node)
		}
		*errs = append(*errs, &Error{Key: key, Rule: fmt.Sprintf("must be %s, got %s", want, got)})
	}

	switch t.Kind() {
	case reflect.Struct:
		m, ok := node.(map[string]any)
		if !ok {
			bad("a mapping")
			return
		}
		fields := yamlFields(t)
		for _, k := range sortedKeys(m) {
			p := joinKey(path, k)
			f, ok := fields[k]
			if !ok {
				*errs = append(*errs, &Error{Key: p, Rule: "unknown key"})
				continue
			}
			if m[k] == nil {
				continue
			}
			present[p] = true
			checkShape(m[k], f.Type, p, present, errs)
		}
	case reflect.Map:
		m, ok := node.(map[string]any)
		if !ok {
			bad("a mapping")
			return
		}
		for _, k := range sortedKeys(m) {
			p := joinKey(path, k)
			present[p] = true
			checkShape(m[k], t.Elem(), p, present, errs)
		}
	case reflect.Slice:
		l, ok := node.([]any)
		if !ok {
			if t == reflect.TypeFor[StringList]() {
				bad("a string or a list of strings (put it in quotes)")
			} else {
				bad("a list")
			}
			return
		}
		for i, el := range l {
			p := fmt.Sprintf("%s[%d]", path, i)
			if el == nil {
				// A null list item would decode to a zero value that
				// applyDefaults cannot tell from an explicit one.
				*errs = append(*errs, &Error{Key: p, Rule: "must not be empty"})
				continue
			}
			present[p] = true
			checkShape(el, t.Elem(), p, present, errs)
		}
	case reflect.String:
		if t == reflect.TypeFor[Duration]() && isZeroNumber(node) {
			return // "delivered: 0" needs no unit; it decodes as "0"
		}
		if _, ok := node.(string); !ok {
			// Refused rather than converted: YAML reads 007 as 7 and
			// 1e3 as 1000, which would silently mangle ids and secrets.
			bad("a string (put it in quotes)")
		}
	case reflect.Bool:
		if _, ok := node.(bool); !ok {
			bad("true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var v int64
		switch n := node.(type) {
		case uint64:
			if n > math.MaxInt64 {
				bad("an integer that fits")
				return
			}
			v = int64(n)
		case int64:
			v = n
		case int:
			v = int64(n)
		default:
			bad("an integer")
			return
		}
		if reflect.Zero(t).OverflowInt(v) {
			bad("an integer that fits")
		}
	case reflect.Float32, reflect.Float64:
		switch n := node.(type) {
		case float64:
			// .nan and .inf are YAML floats too; no key wants them.
			if math.IsNaN(n) || math.IsInf(n, 0) {
				bad("a finite number")
			}
		case uint64, int64, int:
		default:
			bad("a number")
		}
	}
}

// yamlFields maps yaml key names to struct fields.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	fields := make(map[string]reflect.StructField, t.NumField())
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f
	}
	return fields
}

func describe(v any) string {
	switch x := v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return fmt.Sprintf("%q", x)
	default:
		return fmt.Sprint(x)
	}
}

// describeKind names what kind of YAML value v is, never the value.
func describeKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "true or false (the value is not shown: this key may hold a secret)"
	default:
		return "a number (the value is not shown: this key may hold a secret)"
	}
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// isZeroNumber reports whether a YAML scalar is the integer 0.
func isZeroNumber(node any) bool {
	switch n := node.(type) {
	case uint64:
		return n == 0
	case int64:
		return n == 0
	case int:
		return n == 0
	}
	return false
}
