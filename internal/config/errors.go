package config

import "strings"

// ExitConfig is the exit status for a configuration the binary cannot run
// with (EX_CONFIG from sysexits.h), so supervisors can tell "fix the config"
// apart from a crash and avoid restart loops.
const ExitConfig = 78

// Error is one violated rule. Key is the dotted path of the offending key as
// an operator writes it in YAML, e.g. "sources.demo.sinks[0].id".
type Error struct {
	Key  string
	Rule string
}

func (e *Error) Error() string { return e.Key + ": " + e.Rule }

// Errors is every violation found in one pass, so an operator fixes the file
// once instead of once per error.
type Errors []*Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}
