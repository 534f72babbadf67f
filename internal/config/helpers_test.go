package config_test

import (
	"errors"
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
