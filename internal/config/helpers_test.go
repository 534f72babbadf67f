package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/config"
)

// minimal is the smallest valid file.
const minimal = `
sources:
  demo:
    sinks:
      - type: log
`

// env builds a getenv from a map, so tests never read the real environment.
func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := kv[k]
		return v, ok
	}
}

func noEnv(string) (string, bool) { return "", false }

// asErrors extracts the violations of err, failing the test if err is not
// (or does not wrap) config.Errors.
func asErrors(t *testing.T, err error) config.Errors {
	t.Helper()
	if err == nil {
		t.Fatal("expected an error, got nil")
	}
	var errs config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %q (%T) does not wrap config.Errors", err, err)
	}
	return errs
}

// findKey returns the violation of key, or nil.
func findKey(errs config.Errors, key string) *config.Error {
	for _, e := range errs {
		if e.Key == key {
			return e
		}
	}
	return nil
}

// wantViolation fails unless err holds a violation of key whose rule
// contains rule.
func wantViolation(t *testing.T, err error, key, rule string) {
	t.Helper()
	errs := asErrors(t, err)
	e := findKey(errs, key)
	if e == nil {
		t.Fatalf("no violation for %q in: %v", key, err)
	}
	if !strings.Contains(e.Rule, rule) {
		t.Fatalf("%s: rule %q does not contain %q", key, e.Rule, rule)
	}
}

func mustLoad(t *testing.T, yml string, getenv func(string) (string, bool)) *config.Config {
	t.Helper()
	c, err := config.LoadBytes([]byte(yml), getenv)
	if err != nil {
		t.Fatalf("LoadBytes: %v", err)
	}
	return c
}

// wantOutcome checks one row of a rule table: an empty key wants a valid
// config, any other a violation of key whose rule contains rule.
func wantOutcome(t *testing.T, err error, key, rule string) {
	t.Helper()
	if key == "" {
		if err != nil {
			t.Fatalf("want valid, got %v", err)
		}
		return
	}
	wantViolation(t, err, key, rule)
}

// ruleCase is one row of a table of config rules: mod changes a valid
// config; key and rule name the violation Validate must report ("", "":
// the changed config must stay valid).
type ruleCase struct {
	name string
	mod  func(c *config.Config)
	key  string
	rule string
}

// runRules runs each case as a subtest on a fresh base().
func runRules(t *testing.T, base func() *config.Config, tests []ruleCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mod(c)
			wantOutcome(t, c.Validate(), tt.key, tt.rule)
		})
	}
}

// yamlCase is a ruleCase written as a file: key "" means it loads.
type yamlCase struct {
	name, yml string
	key, rule string
}

// runYAMLRules loads wrap(yml) of each case as a subtest.
func runYAMLRules(t *testing.T, wrap func(yml string) string, tests []yamlCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.LoadBytes([]byte(wrap(tt.yml)), noEnv)
			wantOutcome(t, err, tt.key, tt.rule)
		})
	}
}

// rangeCase is a numeric key with its inclusive bounds.
type rangeCase struct {
	key    string
	lo, hi int64
	set    func(c *config.Config, v int64)
}

// runRanges checks that each key refuses one past either bound, naming
// both, and takes the bounds themselves (cross-key rules aside).
func runRanges(t *testing.T, base func() *config.Config, tests []rangeCase) {
	t.Helper()
	for _, tt := range tests {
		for _, v := range []int64{tt.lo - 1, tt.hi + 1} {
			t.Run(fmt.Sprintf("%s=%d", tt.key, v), func(t *testing.T) {
				c := base()
				tt.set(c, v)
				want := fmt.Sprintf("must be between %d and %d, got %d", tt.lo, tt.hi, v)
				wantViolation(t, c.Validate(), tt.key, want)
			})
		}
		for _, v := range []int64{tt.lo, tt.hi} {
			t.Run(fmt.Sprintf("%s=%d ok", tt.key, v), func(t *testing.T) {
				c := base()
				tt.set(c, v)
				if err := c.Validate(); err != nil {
					for _, e := range asErrors(t, err) {
						if e.Key == tt.key && strings.HasPrefix(e.Rule, "must be between") {
							t.Fatalf("bound rejected: %v", e)
						}
					}
				}
			})
		}
	}
}

// quietCase breaks one side of a cross-key rule by its own rule.
type quietCase struct {
	key string
	mod func(c *config.Config)
}

// runQuiet checks that a cross-key rule stays quiet when one side already
// failed its own rule: key's range error is the only violation.
func runQuiet(t *testing.T, base func() *config.Config, tests []quietCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			c := base()
			tt.mod(c)
			errs := asErrors(t, c.Validate())
			if len(errs) != 1 || errs[0].Key != tt.key {
				t.Fatalf("want only the range error, got %v", errs)
			}
		})
	}
}
